#!/usr/bin/env bash
# Session 15, call 3: q4-27b's split input projections. Its GDN b|a (96 x 5120, 8-bit) and attention k|v (2048 x 5120,
# 6-bit) are GEMVs of their own behind a separate norm kernel; 96 rows on the generic path are 48 warps on 12 SMs.
# Steps with the column split (45 / 46, which spreads few rows over every SM) on those tails, then the q4-27b
# timeline with the tails named (gdn_ba, attn_kv), on the route and with 45 on both tails.
#   bash bench/calls/device_s15_call3.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0 \
  --routes "96x5120=45;96x5120=46;2048x5120=45;96x5120=45,2048x5120=45" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee $out/steps.txt
timeout 60 python3 bench/step_timeline.py --recipe q4-27b --pdl 1 --json $out/timeline.json > $out/timeline.txt 2>&1
echo "timeline rc=$?"; grep -A18 "increments" $out/timeline.txt
timeout 60 python3 bench/step_timeline.py --recipe q4-27b --pdl 1 --route "96x5120=45,2048x5120=45" \
  --json $out/timeline-tails45.json > $out/timeline-tails45.txt 2>&1
echo "timeline rc=$?"; grep -A18 "increments" $out/timeline-tails45.txt
echo "total $(( $(date +%s) - t0 )) s"
