#!/usr/bin/env bash
# Session 24, call 6: the warp-stamp anatomy of the new route (down on variant 49) at depth 0, int8 KV, with the
# step's warps saved for bench/warp_study.py: how down's tail, balance by SM and release changed against session 22's
# anatomy (bench/results/anatomy-d0-h200-s22-call1.txt, warps-q4g64-d0-h200-s22-call1.npz).
#   bash bench/calls/device_s24_call6.sh     (carry .whl; ~3 minutes)
set -uo pipefail
export MONORAIL_STAMPS=ON
source bench/device_setup.sh
timeout 200 python3 bench/step_anatomy.py --kv int8 --depth 0 --raw $out/warps-q4g64-d0.npz --json $out/anatomy-d0.json \
  > $out/anatomy-d0.txt 2>&1
echo "d0 rc=$?"; head -40 $out/anatomy-d0.txt
echo "total $(( $(date +%s) - t0 )) s"
