#!/usr/bin/env bash
# Session 19, call 2: where attention variant 7 loses in the step (call 1: isolated it is faster on int4, in the step
# slower by ~0.24 ms at 128K): the per-kernel timeline at 128K, int4 KV, PDL on, variant 4 (the route) against 7.
#   bash bench/calls/device_s19_call2.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
for v in 4 7; do
  timeout 150 python3 bench/step_timeline.py --kv int4 --depth 131072 --pdl 1 --attn-variant $v > $out/timeline-int4-128k-v$v.txt 2>&1
  echo "variant $v rc=$?"; grep -E "graph step|attn|gdn_step|gate_up|down |attn_o" $out/timeline-int4-128k-v$v.txt | head -14
done
echo "total $(( $(date +%s) - t0 )) s"
