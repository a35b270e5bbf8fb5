#!/usr/bin/env bash
# Session 11, call 2: where the step's time goes by role, with PDL on (each kernel's end minus its predecessor's end,
# bench/step_timeline.py) at depth 0 and 128K, and without PDL at depth 0 for comparison. Code at session 10's
# decode path (call 1's L2 prefetch removed).
#   bash bench/device_s11_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
for args in "--pdl 1 --depth 0" "--pdl 1 --depth 131072" "--pdl 0 --depth 0"; do
  tag=$(echo "$args" | tr -d ' -' )
  timeout 120 python3 bench/step_timeline.py --kv int8 --steps 6 $args --json $out/timeline-$tag.json > $out/timeline-$tag.txt 2>&1
  echo "timeline $args rc=$?"; grep -A30 "increments" $out/timeline-$tag.txt | head -24; grep "graph step" $out/timeline-$tag.txt
done
echo "total $(( $(date +%s) - t0 )) s"
