#!/usr/bin/env bash
# Session 20, call 6 (probe; removed after the call): down's variant 36 with L2 prefetches ahead inside its loop (49 /
# 50 / 51: batch k + 2 + 1 / 2 / 4 prefetched when batch k + 2 is loaded into registers; 80 registers as 36 under
# __launch_bounds__(128, 6)), so a warp has more of its row pair in flight than its two register batches. Whole steps.
#   at commit "Probes of session 20 calls 5-6": bash bench/calls/device_s20_call6.sh     (carry .whl; ~2.5 minutes)
set -uo pipefail
source bench/device_setup.sh
base="5120x17408=36"
timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "$base;5120x17408=49;5120x17408=50;5120x17408=51;$base;5120x17408=50;$base" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
