#!/bin/bash
# when_quiet.sh LOADFILE CMD...: waits (up to 2 h) until the host's 1-minute load is below 0.8 and no
# compiler runs, then runs CMD while sampling the host's load and its busiest process every 5 s
# into LOADFILE.
f=$1; shift
for i in $(seq 1440); do
  l=$(cut -d' ' -f1 /proc/loadavg)
  busy=$(ps -eo comm | grep -cE '^(cicc|cc1plus|ptxas|nvcc|cudafe|fatbinary|ld)$')
  awk -v l=$l 'BEGIN{exit !(l<0.8)}' && [ "$busy" = 0 ] && break
  sleep 5
done
echo "start $(date +%T) $(cat /proc/loadavg)" > "$f"
( while sleep 5; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg) top: $(ps -eo pcpu,comm --sort=-pcpu | sed -n 2,4p | tr -s ' ' | paste -sd ';' -)"; done ) >> "$f" &
s=$!
"$@"
rc=$?
kill $s
echo "end $(date +%T) $(cat /proc/loadavg)" >> "$f"
exit $rc
