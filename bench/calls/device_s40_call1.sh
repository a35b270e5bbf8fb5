#!/usr/bin/env bash
# Session 40, call 1 (was s39 call 3) (diagnostics): (a) the tensor-core GEMV inside the engine: causality and determinism of a
# two-token step with it on / off, PDL on / off, graphs on / off (bench/mma_engine_probe.py); (b) where greedy
# speculative tokens leave the one-token greedy tokens on the default route (bench/spec_divergence.py); (c) the
# engine-level tensor-core test (a strict xfail until the fault is fixed); (d) the MTP / speculative tests as revised
# after call 2 (not yet run on a GPU).
set -uo pipefail
source bench/device_setup.sh
timeout 150 python3 bench/mma_engine_probe.py 2>&1 | grep -E "mma|Error" | head -40
timeout 60 python3 bench/spec_divergence.py --mma 0 2>&1 | grep -E "<--|kept|Error" | head -24
timeout 60 python3 -m pytest -q -p no:cacheprovider -rxX tests/test_native_qgemv_mma.py -k engine_steps 2>&1 | tail -3
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_native_mtp.py > "$out/tests-mtp.log" 2>&1
echo "mtp tests rc=$?"; grep -E "MTP|k=|engine:|passed|failed|^E  |^FAILED" "$out/tests-mtp.log" | head -30
echo "total: $(( $(date +%s) - t0 )) s"
