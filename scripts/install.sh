#!/usr/bin/env bash
# Create (or reuse) .venv at the repo root and install Monorail into it.
#   scripts/install.sh          the app and engine
#   scripts/install.sh --test   also the test-only dependencies (pytest, pytest-qt, transformers)
# torch: on a machine without an NVIDIA GPU the CPU build (torch==2.13.0) is installed first,
# so that pip does not pull the multi-GB CUDA build. The native module is compiled from csrc/
# with CUDA when nvcc is found (MONORAIL_CUDA_ARCHS picks the architectures); it then also
# installs the cuBLAS wheel (nvidia-cublas) that the CUDA build links.
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
# With nvcc the native module links cuBLAS (the prefill GEMM): the CUDA 13 wheel must be in the venv
# before the build, which finds it there (CMakeLists.txt) and records an RPATH to it. One that is
# already there (e.g. the version a CUDA build of torch pinned) is kept.
if command -v nvcc >/dev/null 2>&1 && ! python -c "import importlib.metadata as m; m.version('nvidia-cublas')" 2>/dev/null; then
  python -m pip install -q "nvidia-cublas==13.10.0.20"
fi
python -m pip install -q -e ".${extras}"
python -c "from engine.native import native_status; print(native_status().summary())"
