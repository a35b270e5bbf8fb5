#!/usr/bin/env bash
# Session 39, call 2: the native speculative path whole: the MTP head and greedy speculative decoding
# (tests/test_native_mtp.py, with the Engine path), the verify checkpoints (tests/test_native_verify.py, the
# checkpoint op tests); the tensor-core GEMV's op tests (their SwiGLU case fixed) and, where they pass, speculative
# decoding timed with it on (bench/spec_decode.py), the speculative and model modules with it on, and whole steps of
# T = 1, 4, 16 with and without it.
#   bash bench/calls/device_s39_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py tests/test_native_verify.py \
  > "$out/tests-spec.log" 2>&1
echo "spec tests rc=$?"; grep -E "MTP|k=|engine:|commit|rel err|passed|failed|^E  |^FAILED" "$out/tests-spec.log" | head -40
python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_ops.py -k "checkpoint" > "$out/tests-ckpt-ops.log" 2>&1
echo "checkpoint op tests rc=$?"; grep -E "passed|failed|^FAILED" "$out/tests-ckpt-ops.log" | head
python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native_qgemv_mma.py > "$out/tests-mma.log" 2>&1
mma_rc=$?; echo "mma op tests rc=$mma_rc"; grep -E "passed|failed|^FAILED" "$out/tests-mma.log" | head -12
echo "at $(( $(date +%s) - t0 )) s"
mma=$([ $mma_rc -eq 0 ] && echo 1 || echo 0)
(cd bench && MONORAIL_QGEMV_MMA=$mma timeout 120 python3 spec_decode.py --out "$out/spec-decode-$gpu.json") 2>&1 | tail -10
echo "at $(( $(date +%s) - t0 )) s"
if [ $mma_rc -eq 0 ]; then
  MONORAIL_QGEMV_MMA=1 timeout 110 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py \
    tests/test_native_verify.py > "$out/tests-mma-on.log" 2>&1
  echo "modules with mma on rc=$?"; grep -E "MTP|k=|engine:|passed|failed|^FAILED" "$out/tests-mma-on.log" | head -20
  left=$(( ${BUDGET:-400} - ($(date +%s) - t0) ))
  (cd bench && timeout $left python3 step_widths.py --depths 0 --widths 1,4,16 --reps 5 \
    --out "$out/step-widths-$gpu.json") 2>&1 | tail -6
fi
echo "total: $(( $(date +%s) - t0 )) s"
