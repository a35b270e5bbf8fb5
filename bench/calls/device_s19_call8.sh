#!/usr/bin/env bash
# Session 19, call 8: the first run of the warp-stamp diagnostic build (csrc/cuda/stamps.cuh, bench/step_anatomy.py):
# the decode step's boundaries warp by warp, q4g64, int8 KV, depth 0.
#   bash bench/calls/device_s19_call8.sh     (carry .whl; ~2.5 minutes)
set -uo pipefail
export MONORAIL_STAMPS=ON
source bench/device_setup.sh
python3 -c "from engine.native import load_native; print('stamps built:', load_native().stamps_built())"
timeout 100 python3 bench/step_anatomy.py --kv int8 --depth 0 --json $out/anatomy-q4g64-d0.json > $out/anatomy.txt 2>&1
echo "anatomy rc=$?"; cat $out/anatomy.txt | tail -32
echo "total $(( $(date +%s) - t0 )) s"
