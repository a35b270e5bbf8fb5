#!/usr/bin/env bash
# Create (or reuse) .venv at the repo root and install Monorail into it.
#   scripts/install.sh          the app and engine
#   scripts/install.sh --test   also the test-only dependencies (pytest, pytest-qt, transformers)
# torch: on a machine without an NVIDIA GPU the CPU build (torch==2.13.0) is installed first,
# so that pip does not pull the multi-GB CUDA build. The native module is compiled from csrc/
# with CUDA when nvcc is found (MONORAIL_CUDA_ARCHS picks the architectures).
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[[ "${1:-}" == "--test" ]] && extras="[test]"
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    python -m pip install -q "torch>=2.6"
  else
    python -m pip install -q "torch==2.13.0"
  fi
fi
python -m pip install -q -e ".${extras}"
python -c "from engine.native import native_status; print(native_status().summary())"
