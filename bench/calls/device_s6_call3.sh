#!/usr/bin/env bash
# Session 6, call 3: the sx GEMV with K split over a block's warps (31..34, for down) and with a dynamic row-group
# schedule (29, 30: 23 and 27 with grid-wide tickets); every qgemv test, the GEMV table, Nsight Compute on down
# with split-K and gate_up with the dynamic schedule, then the whole-step route search over them.
set -uo pipefail
echo "record of session 6 call 3: the dynamic schedule and K-split variants (29..34 then) it measured were removed after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
timeout 120 python3 bench/gemv_probe.py --variants 0,4,6,23,27,29,30,31,32,33,34 --json $out/gemv-probe.json 2>&1 | tee $out/gemv-probe.txt
for spec in "34816 5120 29" "5120 17408 31" "5120 17408 33"; do
  set -- $spec
  timeout 90 ncu --clock-control none -k regex:qgemv --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats python3 bench/ncu_gemv.py $1 $2 $3 \
    > $out/ncu-$1x$2-v$3.txt 2>&1
  echo "== ncu $1x$2 variant $3 (rc=$?)"
  grep -E "DRAM Throughput|Duration|SM Active Cycles|Elapsed Cycles|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Grid Size" $out/ncu-$1x$2-v$3.txt | head -12
done
timeout 300 python3 bench/route_search.py --depth 0 --steps 30 --candidates 4,6,23,27,29,30,31,32,33,34 --json $out/route-search.json 2>&1 | tee $out/route-search.txt | grep -v "^  "
echo "total $(( $(date +%s) - t0 )) s"
