#!/usr/bin/env bash
# Next session's first call (written in session 15 after its last device call): qgemv_normed's keep_x, where a split
# projection's 4-bit head on variant 30 writes the normalised x for its tail (XOUT) instead of a norm kernel writing it
# first (q4-27b: 64 norm kernels a step). Off by default until this call times it. Tests (the op against the norm
# kernel's x and fp64; a tiny split engine's decode logits with it on and off), then q4-27b steps with it off / on /
# off at depth 0 and 128K. If on wins, make it the default (g_keep_x_fused in qgemv.cu) and rerun the q4-27b benchmark.
#   bash bench/calls/device_s16_call1.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE -s --timeout 90 tests/test_native_ops.py \
  tests/test_native_artifact.py -k "keeps_x or normed or x_layout or split" > $out/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|head writes x" $out/tests.log | head -12
timeout 200 python3 bench/step_probe.py --recipe q4-27b --kv int8 --depths 0,131072 --keep-x-fused 0,1,0 2>&1 \
  | grep -E "recipe|step|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
