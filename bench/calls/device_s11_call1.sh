#!/usr/bin/env bash
# (The --l2-prefetch option it times was removed after this call: the prefetch lost, bench/NOTES.md session 11.)
# Session 11, call 1: the GDN step and the attention prep ask L2 for the next GEMV's weights (gdn_out, the attention
# output; csrc/cuda/l2_prefetch.cuh) while DRAM would otherwise idle. The bit-for-bit step test and the model tests,
# then whole steps with the prefetch at 128-byte lines (the default), 32-byte lines and off, at depths 0 / 8K / 128K,
# the attention's context limit, a prefix of gate_up's codes asked for as well (GDN step / attention prep, in MB), and
# gdn_out / o's route with the prefetch on (the weights then come from L2).
#   bash bench/calls/device_s11_call1.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 tests/test_native_model.py \
  tests/test_native_engine.py > $out/tests.log 2>&1; echo "tests rc=$?"
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_ops.py -k "gdn" \
  >> $out/tests.log 2>&1; echo "gdn op tests rc=$?"
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 60 tests/test_native_attn_decode.py \
  >> $out/tests.log 2>&1; echo "attention tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
echo "tests done: $(( $(date +%s) - t0 )) s"
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,8192,131072 \
  --l2-prefetch 0:0,128:0,32:0,128:8192,128:8192:4:0,128:8192:0:16,128:8192:8:24,0:0,128:0 2>&1 | grep -E "step" | tee $out/steps.txt
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0 \
  --routes "5120x6144=33;5120x6144=31;5120x6144=1;5120x6144=2;5120x6144=33" 2>&1 | grep -E "step" | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
