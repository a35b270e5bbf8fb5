#!/usr/bin/env bash
# Written in session 20, run in session 22 (call 1; bench/results/anatomy-*-h200-s22-call1.*): the first GPU run
# of the wait records (pdl_wait() in the diagnostic build stamps each warp's return from its PDL wait;
# step_anatomy.py prints per role `release`, the median warp's return minus the predecessor's last warp end, and
# `after`, its end minus that return). How long does the PDL release itself take at each boundary? q4g64 int8 at
# depth 0 and 128K; the depth-0 step's warps saved (--raw).
#   bash bench/calls/device_s21_call1.sh     (carry .whl; ~3 minutes)
set -uo pipefail
export MONORAIL_STAMPS=ON
source bench/device_setup.sh
timeout 150 python3 bench/step_anatomy.py --kv int8 --depth 0 --raw $out/warps-q4g64-d0.npz --json $out/anatomy-d0.json \
  > $out/anatomy-d0.txt 2>&1
echo "d0 rc=$?"; head -16 $out/anatomy-d0.txt
timeout 150 python3 bench/step_anatomy.py --kv int8 --depth 131072 > $out/anatomy-d128k.txt 2>&1
echo "128k rc=$?"; head -16 $out/anatomy-d128k.txt
echo "total $(( $(date +%s) - t0 )) s"
