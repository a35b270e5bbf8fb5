#!/usr/bin/env bash
# Session 40, call 1, kept as it ran: the diagnostic switches it sets (MONORAIL_QGEMV_MMA_LATE / _NO_SPLIT, and the
# probe's late-release and no-split rows) were removed after it found the cause, so a rerun ignores them.
# The tensor-core GEMV inside the engine, then the speculative tests:
#   (a) bench/mma_engine_probe.py: causality / determinism of T = 2 and 16 steps with the tensor-core GEMV, PDL,
#       graphs, the late PDL release, no K split and the engine's leave-one-out masks switched;
#   (b) tests/test_native_mtp.py on the default route (incl. the new snapshot test);
#   (c) the MTP, verify and tensor-core engine tests with the tensor-core GEMV on plus the switch the probe found
#       clean (late release, else no split, else late + no split); (d) spec_decode.py on the 27B where (c) passes.
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 bench/mma_engine_probe.py > "$out/mma-probe.txt" 2>&1; echo "probe rc=$?"
grep -E "mma|Error" "$out/mma-probe.txt" | head -40
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py > "$out/tests-mtp.log" 2>&1
echo "mtp tests rc=$?"; grep -E "MTP|k=|engine:|passed|failed|^E  |^FAILED" "$out/tests-mtp.log" | head -30
export MONORAIL_QGEMV_MMA=1
if grep -q "trigger late: row 0 \[a,b\] vs \[a,c\] 0.00e+00, nan False" "$out/mma-probe.txt"; then
  export MONORAIL_QGEMV_MMA_LATE=1
elif grep -q "no split: row 0 \[a,b\] vs \[a,c\] 0.00e+00, T=16 rows 0..14 0.00e+00, nan False" "$out/mma-probe.txt"; then
  export MONORAIL_QGEMV_MMA_NO_SPLIT=1
else
  export MONORAIL_QGEMV_MMA_LATE=1 MONORAIL_QGEMV_MMA_NO_SPLIT=1
fi
echo "== MMA on, late ${MONORAIL_QGEMV_MMA_LATE:-0}, no split ${MONORAIL_QGEMV_MMA_NO_SPLIT:-0}"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py tests/test_native_verify.py \
  tests/test_native_qgemv_mma.py -k "not against_fp64" > "$out/tests-mtp-mma-switched.log" 2>&1
echo "tests rc=$?"; grep -E "MTP|k=|engine:|passed|failed|^E  |^FAILED|XPASS" "$out/tests-mtp-mma-switched.log" | head -30
# (d) only where the switch cleared the engine-level test (a strict xfail: it then reports XPASS)
if grep -q "XPASS" "$out/tests-mtp-mma-switched.log"; then
  timeout 150 python3 bench/spec_decode.py --out "$out/spec-decode-mma-switched.json" --drafts 3 --accept 0.8,1 \
    > "$out/spec-decode.log" 2>&1
  echo "spec_decode rc=$?"; tail -8 "$out/spec-decode.log"
fi
echo "total: $(( $(date +%s) - t0 )) s"
