#!/bin/bash
# Fifth call (warm, right after c4.sh, whose comparison refused one build): the run-length cases
# with main's tools named twice (compare.sh wants two builds; four runs of each case), then the
# suite's two-process half. Carry build/tools/gv_{write,read,send}_bw, gv_write_lat, gv_post_rate,
# gv_compute_send.
S=$OUT/summary.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 90 bench/compare.sh --out $OUT/cmp4 --reps 2 --cases docs/perf-logs/2026-12-06-session30/n-cases.txt \
  main=build/tools main_again=build/tools > $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
rm -f $OUT/cmp4/compare.log $OUT/cmp4/compare.txt
timeout 130 bench/run_two_process.sh build/tools $OUT/tp > $OUT/tp-stdout.txt 2>&1
echo "two-process exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/tp-stdout.txt >> $S
mv $OUT/tp/results*.jsonl $OUT/ 2>/dev/null
tar czf $OUT/tp-logs.tgz -C $OUT tp tp-stdout.txt && rm -rf $OUT/tp $OUT/tp-stdout.txt
cat $S
