#!/bin/bash
# A/B on the H200: new (this tree) vs base48 (48c1ee3) vs basecf (cf60985).
set -u
OUTD=${OUT:-/tmp/out}; mkdir -p $OUTD
LOG=$OUTD/ab.txt
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUTD/gpu.txt 2>&1
mkdir -p /tmp/b48 /tmp/bcf
tar -xf .devcarry/base48.tar -C /tmp/b48
tar -xf .devcarry/basecf.tar -C /tmp/bcf
build() { # dir targets...
  local d=$1; shift
  cmake -S $d -B $d/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $d/cmake.log 2>&1 || { echo "cmake failed $d"; tail -20 $d/cmake.log; }
  cmake --build $d/build -j6 --target "$@" > $d/build.log 2>&1 || { echo "build failed $d"; grep -m5 -B2 -A8 "error" $d/build.log; }
}
build . gv_write_bw gv_write_lat gv_send_bw gv_probe_path &
build /tmp/b48 gv_write_bw gv_write_lat gv_send_bw gv_probe_path &
build /tmp/bcf gv_write_bw gv_write_lat &
wait
echo "build done $(( $(date +%s) - T0 )) s" | tee -a $LOG
N=build/tools; B=/tmp/b48/build/tools; C=/tmp/bcf/build/tools
for f in $N/gv_write_bw $B/gv_write_bw $C/gv_write_bw; do echo "== res-usage $f" >> $OUTD/res.txt; cuobjdump -res-usage $f 2>/dev/null | grep -A1 "bw_kernel\|lat_kernel" | grep -o "REG:[0-9]* STACK:[0-9]*" | sort | uniq -c >> $OUTD/res.txt; done
cuobjdump -sass $N/gv_write_lat 2>/dev/null | grep -cE "CCTL|PREF|LDG.*PF" > $OUTD/prefetch-sass.txt
cuobjdump -sass $N/gv_write_lat 2>/dev/null | grep -E "CCTL|PREF" | sort | uniq -c | head >> $OUTD/prefetch-sass.txt
run() { # label cmd...
  local l=$1; shift
  echo "== $l: $*" >> $LOG
  timeout 60 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG
}
for r in 1 2; do
  run "b48 r$r" $B/gv_probe_path
  run "new r$r" $N/gv_probe_path
  run "b48 r$r" $B/gv_probe_path --batch 256
  run "new r$r" $N/gv_probe_path --batch 256
  for t in C B N; do eval d=\$$t; run "$t r$r" $d/gv_write_lat -s 8; done
  for t in C B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 264 -t 512 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 8 -q 66 -t 64 -n 4096 --reps 3; done
  echo "round $r done $(( $(date +%s) - T0 )) s" | tee -a $LOG
done
