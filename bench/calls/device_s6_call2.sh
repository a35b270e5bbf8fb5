#!/usr/bin/env bash
# Session 6, call 2: the block-wide cp.async ring reshaped after call 1 (balanced stages, 5-warp blocks, 2-4 blocks
# per SM; the per-kernel shared-memory limit fix), its oracle tests with every other qgemv test, the GEMV table,
# Nsight Compute counters of the route's gate_up (23) and down (4) kernels and of ring 29 on gate_up, and, only when
# a ring variant is fastest for some shape in the table, the whole-step route search over them.
set -uo pipefail
echo "record of session 6 call 2: the reshaped block-wide cp.async ring it measured were removed after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "qgemv" > $out/tests.log 2>&1
echo "qgemv tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -16
timeout 120 python3 bench/gemv_probe.py --variants 0,23,27,29,30,31,32,33 --json $out/gemv-probe.json 2>&1 | tee $out/gemv-probe.txt
for spec in "34816 5120 23" "5120 17408 4" "34816 5120 29" "5120 17408 33"; do
  set -- $spec
  timeout 90 ncu --clock-control none -k regex:qgemv --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats python3 bench/ncu_gemv.py $1 $2 $3 \
    > $out/ncu-$1x$2-v$3.txt 2>&1
  echo "== ncu $1x$2 variant $3 (rc=$?)"
  grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|Stall|Grid Size|Waves Per SM" $out/ncu-$1x$2-v$3.txt | head -24
done
if python3 -c "import json,sys; b=json.load(open('$out/gemv-probe.json'))['4']['best']; sys.exit(0 if any(v>=29 for v in b.values()) else 1)"; then
  timeout 240 python3 bench/route_search.py --depth 0 --steps 30 --candidates 4,23,27,29,30,31,32,33 --json $out/route-search.json 2>&1 | tee $out/route-search.txt | grep -v "^  "
else
  echo "no ring variant is fastest for any shape: no route search"
fi
echo "total $(( $(date +%s) - t0 )) s"
