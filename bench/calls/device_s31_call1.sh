#!/usr/bin/env bash
# Session 31, call 1, on the tree with finish_wide's first speed-ups (bench/patches/finish-wide-batch.patch: its
# radix passes load 4 ids a thread a round before their histogram adds; the draw takes the best float32 score from the winner's thread instead of a pass over
# the list, and only threads whose own best reaches the floor walk the list for the float64 scores).
#  1. each sampler kernel's duration under Nsight Compute on the flat and broad rows, top-p 0.9 (session 30: finish
#     279 us flat, 64 broad, H100); prediction: flat finish 279 -> 150-200 us, broad unchanged;
#  2. the warp-state sampler over sample_finish_kernel on the flat row, by source line (where the rest goes);
#  3. sampler_time at the library's defaults;
#  4. the sampler and token-loop tests (session 30's subset; test_slice_draw_is_the_host_samplers now accepts
#     state 2, see NOTES session 30).
# Every GPU test module is call 2 (bench/calls/device_s31_tests.sh): both do not fit one call's 10 minutes.
#   bash bench/calls/device_s31_call1.sh     (carry .whl; ~6 minutes)
# Ran as session 32's call 1. The patch has since landed (ebcd621) and its file is gone, so this no longer runs as
# written; ncu_source_top.py now takes --top N and reads the SASS page (device_s32_call3.sh is the current form).
set -uo pipefail
# the speed-ups travel as a patch until they have run on a GPU (main keeps the tested finish_wide)
git apply bench/patches/finish-wide-batch.patch || { echo "PATCH DID NOT APPLY"; exit 1; }
source bench/device_setup.sh
bash bench/ncu_sampler_durations.sh "$out" flat broad
timeout 90 ncu --clock-control none -k regex:sample_finish -s 1 -c 1 --section SourceCounters \
  --section WarpStateStats --section LaunchStats --import-source yes \
  -o $out/finish-flat python3 bench/ncu_sampler.py flat "no top-k, top-p 0.9" 3 > $out/ncu-finish.log 2>&1
echo "ncu source rc=$?"; tail -2 $out/ncu-finish.log
ncu --import $out/finish-flat.ncu-rep --page source --csv --print-source cuda > $out/finish-source.csv 2>&1 \
  || ncu --import $out/finish-flat.ncu-rep --page source --csv > $out/finish-source.csv 2>&1
python3 bench/ncu_source_top.py $out/finish-source.csv 30 || head -c 2000 $out/finish-source.csv
ncu --import $out/finish-flat.ncu-rep --page details > $out/finish-details.txt 2>&1
grep -E "Duration|Stall|Registers Per|Warp Cycles" $out/finish-details.txt | head -12
timeout 60 python3 bench/sampler_time.py --reps 100 --json $out/sampler-time.json > $out/sampler-time.log 2>&1
echo "sampler_time rc=$?"; tail -16 $out/sampler-time.log
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken or wide" \
  > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
