#!/bin/bash
# Session 20 call 7: gv_probe_path with its new SEND mode (--op send, --size), built on the
# development machine from this tree (nvcc 13.0, sm_90, -O3; carried as .devcarry/gv_probe_path):
# where a SEND's time goes, beside a WRITE's, one thread, lone and in drains of 16-64 WQEs.
set -u
P=.devcarry/gv_probe_path
for args in "--op write" "--op send" "--op write --batch 64" "--op send --batch 64" \
            "--op send --size 64 --batch 64" "--op write --size 4096 --batch 16" "--op send --size 4096 --batch 16"; do
  echo "== gv_probe_path $args" >> $OUT/probe.txt
  timeout 60 $P $args >> $OUT/probe.txt 2>&1 || echo "   (exit $?)" >> $OUT/probe.txt
done
