#!/usr/bin/env bash
# Session 32, call 3: the 64-bit shared-memory atomicAdd, which nvcc compiles to a compare-and-swap loop
# (ATOMS.CAST.SPIN.64, read in the SASS with cuobjdump), replaced by two native 32-bit adds (shared_add_u64) in
# finish_wide's histograms and collect's bins. On a flat row every lane adds to the same one or two buckets, so the
# loop's retries serialise the block; ncu counted 18.6 of 32 threads active a warp in finish (session 32, call 1).
#  1. each sampler kernel's duration under ncu, flat and broad rows, top-p 0.9; prediction: flat finish 224 -> 80-120
#     us, flat collect 21.7 -> 10-14, broad finish 64.7 -> 40-60;
#  2. finish's warp states and its source page by SASS line (what is left);
#  3. sampler_time (prediction: flat top-p 0.9 278 -> 130-180 us a draw);
#  4. the sampler and token-loop tests.
#   bash bench/calls/device_s32_call3.sh     (carry .whl; ~5 minutes)
set -uo pipefail
source bench/device_setup.sh
bash bench/ncu_sampler_durations.sh "$out" flat broad
timeout 90 ncu --clock-control none -k regex:sample_finish -s 1 -c 1 --section SourceCounters \
  --section WarpStateStats --section LaunchStats --import-source yes \
  -o $out/finish-flat python3 bench/ncu_sampler.py flat "no top-k, top-p 0.9" 3 > $out/ncu-finish.log 2>&1
echo "ncu source rc=$?"
ncu --import $out/finish-flat.ncu-rep --page source --csv --print-source sass > $out/finish-sass.csv 2>&1
head -c 600 $out/finish-sass.csv; echo
python3 bench/ncu_source_top.py $out/finish-sass.csv --top 30
ncu --import $out/finish-flat.ncu-rep --page details > $out/finish-details.txt 2>&1
grep -E "Warp Cycles|Active Threads|Registers Per" $out/finish-details.txt | head -6
rm -f $out/finish-flat.ncu-rep $out/build.log $out/ncu-finish.log  # the device returns at most 8 files
timeout 60 python3 bench/sampler_time.py --reps 100 --json $out/sampler-time.json > $out/sampler-time.log 2>&1
echo "sampler_time rc=$?"; grep -E '"flat"|"broad"' $out/sampler-time.log | grep -E "top-p|min-p|temperature" 
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_sampler.py \
  tests/test_native_ops.py tests/test_native_model.py -k "sampl or memory or draw or loop or broken or wide" \
  > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | tail -12
echo "total $(( $(date +%s) - t0 )) s"
