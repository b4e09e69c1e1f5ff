#!/bin/bash
# session 33 call 2 (warm, after c1's build): which code ran; two-process latency pairs
# (gv_write_lat, then gv_write_bw --lat, call 2 of session 32's hang), logs kept; loopback latency;
# SASS of gv_write_lat's kernels.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
grep -c mr_load_if include/gpuverbs/detail/soft/direct.cuh include/gpuverbs/detail/soft/mr_check.cuh >> $S
grep -c ci_first include/gpuverbs/detail/soft/fast.cuh >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
B=build/tools
LOGS=$OUT/tp; mkdir -p $LOGS; PORT=18515; LIMIT=60; n=0; failed=0
PAIR_SERVER_ARGS=(); PAIR_CLIENT_ARGS=()
source bench/pair.sh
BIN=$B
run_pair $OUT/tp.jsonl gv_write_lat -s 8 -n 10000 >> $S 2>&1
run_pair $OUT/tp.jsonl gv_write_lat -s 64 -n 10000 >> $S 2>&1
run_pair $OUT/tp.jsonl gv_write_bw --lat -s 8 -n 10000 >> $S 2>&1
echo get_server_list | timeout 5 nvidia-cuda-mps-control >/dev/null 2>&1 && { echo quit | timeout 10 nvidia-cuda-mps-control; echo "mps stopped" >> $S; }
for i in 1 2 3; do timeout 60 $B/gv_write_lat -s 8 -n 10000 --json >> $OUT/loop.jsonl 2>>$OUT/loop.err; done
echo "after pairs+loop at ${SECONDS} s" >> $S
cuobjdump -sass $B/gv_write_lat > $OUT/lat.sass 2>&1
grep -E '"t_typical|typical' $OUT/tp.jsonl $OUT/loop.jsonl | head >> $S
tar czf $OUT/logs.tgz -C $OUT tp lat.sass && rm -rf $OUT/tp $OUT/lat.sass
cat $S
