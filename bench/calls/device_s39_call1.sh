#!/usr/bin/env bash
# Session 39, call 1: (a) the native MTP head against the reference (tests/test_native_mtp.py; its speculative tests
# need the verify checkpoints, not merged yet, and are expected to fail here), (b) session 38's call 3: the
# tensor-core GEMV of T = 2..16 (its op tests, then whole steps of T = 1..16 with and without it), (c) the trunk's
# modules after the attention/MLP refactor, with the tensor-core GEMV on where its op tests passed.
#   bash bench/calls/device_s39_call1.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py > "$out/tests-mtp.log" 2>&1
echo "mtp tests rc=$?"; grep -E "MTP|k=|passed|failed|^E " "$out/tests-mtp.log" | head -30
python3 -m pytest -q -p no:cacheprovider -rfE -x tests/test_native_qgemv_mma.py > "$out/tests-mma.log" 2>&1
mma_rc=$?; echo "mma op tests rc=$mma_rc"; tail -3 "$out/tests-mma.log"
[ $mma_rc -ne 0 ] && grep -E "^E " "$out/tests-mma.log" | head -12
if [ $mma_rc -eq 0 ]; then
  (cd bench && timeout 150 python3 step_widths.py --out "$out/step-widths-$gpu.json") 2>&1 | tail -14
fi
echo "widths done: $(( $(date +%s) - t0 )) s"
left=$(( ${BUDGET:-560} - ($(date +%s) - t0) ))
mma=$([ $mma_rc -eq 0 ] && echo 1 || echo 0)
MONORAIL_QGEMV_MMA=$mma timeout $left python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_model.py \
  tests/test_native_prefill.py tests/test_native_sampler.py -k "not timing_probe" > "$out/tests.log" 2>&1
echo "tests (mma=$mma) rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
echo "total: $(( $(date +%s) - t0 )) s"
