#!/usr/bin/env bash
# Session 13, call 1: how much of the GDN step's 5.5 us a layer is its state traffic (64 KB in and out per head, on
# 48 SMs, loaded only once gdn_in's block on the SM has exited). Probe set_gdn_state_probe (breaks the output):
# whole steps with the state loaded and stored (0), neither (1), loaded only (2); per-role timeline at 0 and 1.
#   bash bench/calls/device_s13_call1.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,131072 --gdn-state-probes 0,1,2,0,1 2>&1 \
  | grep -E "step|Error|error" | tee $out/steps.txt
for p in 0 1; do
  timeout 120 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --gdn-state-probe $p \
    --json $out/timeline-probe$p.json > $out/timeline-probe$p.txt 2>&1
  echo "timeline probe $p rc=$?"; grep -A16 "increments" $out/timeline-probe$p.txt | head -16
done
echo "total $(( $(date +%s) - t0 )) s"
