#!/usr/bin/env bash
# Session 20, call 1: the warp-stamp anatomy three ways (session 19's call 9 plus two more):
#   q4g64 int8 depth 0 (now with the tail by SM), q4g64 int8 depth 131072, q4-27b int8 depth 0.
#   bash bench/calls/device_s20_call1.sh     (carry .whl; ~4 minutes)
set -uo pipefail
export MONORAIL_STAMPS=ON
source bench/device_setup.sh
for run in "q4g64 0" "q4g64 131072" "q4-27b 0"; do
  set -- $run
  tag="anatomy-$1-d$2"
  timeout 150 python3 bench/step_anatomy.py --kv int8 --recipe $1 --depth $2 --json $out/$tag.json > $out/$tag.txt 2>&1
  echo "== $tag rc=$? ($(( $(date +%s) - t0 )) s)"; tail -40 $out/$tag.txt
done
echo "total $(( $(date +%s) - t0 )) s"
