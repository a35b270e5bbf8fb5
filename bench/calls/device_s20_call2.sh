#!/usr/bin/env bash
# Session 20, call 2: the anatomy with each warp's block and place in it (stamps.cuh packs them), the load by SM per
# role (step_anatomy.balance_report) and the kept step's warps saved for offline study (--raw), q4g64 int8 depth 0.
#   bash bench/calls/device_s20_call2.sh     (carry .whl; ~2.5 minutes)
set -uo pipefail
export MONORAIL_STAMPS=ON
source bench/device_setup.sh
timeout 150 python3 bench/step_anatomy.py --kv int8 --depth 0 --raw $out/warps-q4g64-d0.npz > $out/anatomy.txt 2>&1
echo "anatomy rc=$?"; tail -32 $out/anatomy.txt
echo "total $(( $(date +%s) - t0 )) s"
