#!/usr/bin/env bash
# Create or reuse .venv, install Monorail with its test dependencies, run the whole test suite.
# Without a GPU, CUDA sources are still compiled when nvcc is present (for one consumer
# architecture, sm_86, to keep them compiling) and GPU tests are skipped. With nvcc, install.sh
# also installs the cuBLAS wheel (nvidia-cublas, pinned there) before the native build, which links it.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v nvcc >/dev/null 2>&1 && ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  export MONORAIL_CUDA_ARCHS="${MONORAIL_CUDA_ARCHS:-86}"
fi
scripts/install.sh --test
. .venv/bin/activate
export QT_QPA_PLATFORM=offscreen
python -m pytest -q "$@"
