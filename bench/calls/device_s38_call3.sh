#!/usr/bin/env bash
# Session 38, call 3 (not run: the session's device time ran out): the GEMV of T = 2..16 tokens on tensor cores
# (csrc/cuda/qgemv_mma.cuh). Its op tests first (they switch it on; stop there if they fail), then whole steps of
# T = 1..16 with it and with the per-token kernel (bench/step_widths.py), then every GPU test module with it on
# (MONORAIL_QGEMV_MMA=1; MMA=0 for the default route). If all pass, turn it on by default (qgemv.cu g_mma = true).
#   bash bench/calls/device_s38_call3.sh     (carry .whl; ~8 minutes on a fresh machine)
#   TESTS="tests/test_native_model.py ..." BUDGET=300 bash bench/calls/device_s38_call3.sh   (fewer modules, a shorter call)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
grep -E "qgemv_mma" "$out/build.log" | head -3
python3 -m pytest -q -p no:cacheprovider -rfE -x tests/test_native_qgemv_mma.py > "$out/tests-mma.log" 2>&1
rc=$?; echo "mma tests rc=$rc"; tail -3 "$out/tests-mma.log"
[ $rc -ne 0 ] && { grep -E "^E " "$out/tests-mma.log" | head -20; exit 1; }
(cd bench && timeout 150 python3 step_widths.py --out "$out/step-widths-$gpu.json") 2>&1 | tail -14
(cd bench && timeout 120 python3 step_widths.py --recipe q4-27b --depths 0 --widths 1,4,16 \
  --out "$out/step-widths-q4-27b-$gpu.json") 2>&1 | tail -5
echo "widths done: $(( $(date +%s) - t0 )) s"
left=$(( ${BUDGET:-570} - ($(date +%s) - t0) ))
# MMA=1: every module with the tensor-core GEMV on (engine/native.py MONORAIL_QGEMV_MMA), as the route would be
MONORAIL_QGEMV_MMA=${MMA:-1} timeout $left python3 -m pytest -q -p no:cacheprovider -rfE ${TESTS:-tests/test_native*.py tests/test_plan.py} \
  -k "not timing_probe" > "$out/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
echo "total: $(( $(date +%s) - t0 )) s"
