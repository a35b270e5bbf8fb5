#!/usr/bin/env bash
# Written in session 15 for the next one: a whole-step route search on q4-27b's 5/6/8-bit shapes (bench/route_search.py
# --recipe: its split heads and tails are shapes of their own), over the kernels every width has (generic 1, rings
# 16..19, the column split 45 / 46) and 36 (5 / 6 bits). The 4-bit shapes keep their route (searched in session 5).
#   bash bench/calls/device_s16_call3.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 480 python3 bench/route_search.py --recipe q4-27b --steps 20 --verify 3 \
  --shapes 5120x17408,5120x6144,248320x5120,2048x5120,96x5120 --candidates 1,16,17,18,19,36,45,46 \
  --json $out/route-search-q4-27b.json 2>&1 | tee $out/route-search-q4-27b.txt
echo "total $(( $(date +%s) - t0 )) s"
