#!/usr/bin/env bash
# Session 35, call 1: the app's engine process (engine/worker.py, default factory) on the native backend, and the
# NVML readings behind the dashboard, on a real GPU: tests/test_native_worker.py (new), with the engine-API and
# artifact modules it builds on (engine/api.py changed: ModelInfo.vision_tower). The NVML samples taken during a
# reply come back as nvml-samples.json, for a dashboard screenshot replayed off the device.
#   bash bench/calls/device_s35_call1.sh     (carry .whl; ~4 minutes)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit,clocks.sm --format=csv > "$out/gpu.txt" 2>&1
python3 -m engine.cli info > "$out/info.txt" 2>&1
MONORAIL_NVML_SAMPLES_OUT="$out/nvml-samples.json" python3 -m pytest -q -p no:cacheprovider -rfEs \
  tests/test_native_worker.py tests/test_native_engine.py tests/test_native_artifact.py > "$out/tests.log" 2>&1
echo "tests rc=$?"
tail -25 "$out/tests.log"
cat "$out/info.txt" "$out/gpu.txt"
echo "total: $(( $(date +%s) - t0 )) s"
