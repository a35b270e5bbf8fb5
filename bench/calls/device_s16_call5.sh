#!/usr/bin/env bash
# Session 16: the q4g64 step (the benchmark of record's recipe) at this commit, to show the sx kernel's move into a
# device function (sx_gemv) left its route as fast as before (session 14/15: 4.615-4.66 ms at depth 0, ~5.85 at 128K);
# then a q4-27b step timeline with PDL (where its step goes now that the split projections are one kernel each).
#   bash bench/calls/device_s16_call5.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 120 python3 bench/step_probe.py --kv int8 --depths 0,131072 2>&1 | grep -E "recipe|step|Error|error" \
  | tee $out/steps-q4g64.txt
timeout 90 python3 bench/step_timeline.py --recipe q4-27b --pdl 1 --json $out/timeline.json > $out/timeline.txt 2>&1
echo "timeline rc=$?"; head -40 $out/timeline.txt
echo "total $(( $(date +%s) - t0 )) s"
