#!/usr/bin/env bash
# Session 20, call 5 (timing probe; the probe variants give wrong results and were removed after the call): is the
# weights' access pattern what holds down at ~3.2 TB/s in its body? 56: down's variant 36 reading its codes as if each
# row pair's batch of 64 chunks were one contiguous 2 KB block (a tiled layout); 57: gate_up's 37 so (4 KB blocks).
# Random weights, so the timing is that of the layout; only whole steps are timed.
#   at commit "Probes of session 20 calls 5-6": bash bench/calls/device_s20_call5.sh     (carry .whl; ~2.5 minutes)
set -uo pipefail
source bench/device_setup.sh
base="5120x17408=36,34816x5120=37"
timeout 240 python3 bench/step_probe.py --kv int8 --depths 0,131072 \
  --routes "$base;5120x17408=56;34816x5120=57;5120x17408=56,34816x5120=57;$base" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
