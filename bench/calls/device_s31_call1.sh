#!/usr/bin/env bash
# Session 31, call 1: every GPU test module at HEAD, the first full run since c60e271 (session 24) and the first
# with the wide select and top-k narrowing on by default (test_slice_draw_is_the_host_samplers now accepts state 2:
# session 30's call 1 failed its four top-p cases there, as far as its lost log can tell); then the warp-state
# sampler of Nsight Compute over sample_finish_kernel on the wide select's row (flat, top-p 0.9: 279 us under
# ncu in session 30), by source line, to see which of finish_wide's loops hold the time before changing any.
#   bash bench/calls/device_s31_call1.sh     (carry .whl; ~8 minutes)
set -uo pipefail
source bench/device_setup.sh
timeout 150 ncu --clock-control none -k regex:sample_finish -s 1 -c 1 --set full --import-source yes \
  -o $out/finish-flat python3 bench/ncu_sampler.py flat "no top-k, top-p 0.9" 3 > $out/ncu-finish.log 2>&1
echo "ncu rc=$?"; tail -3 $out/ncu-finish.log
ncu --import $out/finish-flat.ncu-rep --page source --csv --print-source cuda > $out/finish-source.csv 2>&1 \
  || ncu --import $out/finish-flat.ncu-rep --page source --csv > $out/finish-source.csv 2>&1
python3 bench/ncu_source_top.py $out/finish-source.csv 30 || head -c 3000 $out/finish-source.csv
ncu --import $out/finish-flat.ncu-rep --page details > $out/finish-details.txt 2>&1
grep -E "Duration|Executed Instructions |Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per|Stall" \
  $out/finish-details.txt | head -20
timeout 420 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native*.py \
  -k "not timing_probe" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
