#!/usr/bin/env bash
# Session 39, call 3 (diagnostic): where greedy speculative tokens leave the one-token greedy tokens on a tiny
# checkpoint, with the tensor-core GEMV off and on (bench/spec_divergence.py).
set -uo pipefail
source bench/device_setup.sh
timeout 60 python3 bench/spec_divergence.py --mma 0 2>&1 | tail -40
timeout 60 python3 bench/spec_divergence.py --mma 1 2>&1 | tail -30
echo "total: $(( $(date +%s) - t0 )) s"
