#!/usr/bin/env bash
# Session 14, call 5: decode steps with the converter's default recipe q4-27b (5-bit down / gdn_out / attention
# output, 6-bit lm_head and attention k|v, 8-bit GDN b|a; 14.95 GB a step against q4g64's 13.61), whose 5/6/8-bit
# GEMV routes were chosen on isolated GEMVs in session 3 and never on whole steps. The route first, then the other
# T = 1 kernels every width has (ring 16..19, the generic per-element path 1) on each 5/6-bit shape, int8 KV.
#   bash bench/calls/device_s14_call5.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
r="5120x17408=16;5120x17408=17;5120x17408=18;5120x17408=1"
r="$r;5120x6144=16;5120x6144=17;5120x6144=19;5120x6144=1"
r="$r;248320x5120=16;248320x5120=17;248320x5120=19;248320x5120=1;2048x5120=16;2048x5120=1"
timeout 360 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0,131072 --routes "$r" 2>&1 \
  | grep -E "recipe|step|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
