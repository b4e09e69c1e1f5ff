#!/bin/bash
# posting rate: old vs new builders, host and device memory, with the same-run store ceilings
cd "$(dirname "$0")/bin"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
for q in 66 264; do for b in old new; do
  timeout 120 ./gv_post_rate_$b --mem host -q $q --json | sed "s/^{/{\"bin\":\"$b\",/" >> $OUT/post_host.jsonl 2>>$OUT/err.txt
done; done
for q in 264 528; do for b in old new; do
  timeout 60 ./gv_post_rate_$b --mem device -q $q --json | sed "s/^{/{\"bin\":\"$b\",/" >> $OUT/post_dev.jsonl 2>>$OUT/err.txt
done; done
for q in 264; do for b in new old; do
  timeout 120 ./gv_post_rate_$b --mem host -q $q --json | sed "s/^{/{\"bin\":\"$b\",\"rep\":2,/" >> $OUT/post_host.jsonl 2>>$OUT/err.txt
done; done
cat $OUT/*.jsonl $OUT/err.txt
