#!/usr/bin/env bash
# Session 9, call 6 (refused: too little device time left; the next session's first call): GEMV variants 36 / 37
# (variant 4 with x staged per block one batch at a time, U = 2 / 1): their oracle tests, then whole decode steps with
# them routed to down and to gdn_out / o; then the attention split variants 4..6 on whole steps at 128K (int8, int4 KV).
#   bash bench/calls/device_s9_call6.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 50 tests/test_native_ops.py -k "launch_variants and (36 or 37)" \
  > $out/tests.log 2>&1; echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -8
D=5120x17408; O=5120x6144
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0 --routes "$D=36;$D=37;$O=36;$O=37;$D=36,$O=36;$D=37,$O=37" 2>&1 | grep -E "step|route" | tee $out/steps.txt
echo "routes done: $(( $(date +%s) - t0 )) s"
# the attention split variants 5 / 6 (3 / 4 warps a block) on whole steps at 128K; session 8's timing probe had int4
# on 6 at 0.080 against 0.088 ms a layer, int8 no faster
timeout 150 python3 bench/step_probe.py --kv int8,int4 --depths 131072 --gemv-variants 0 --attn-variants 4,5,6 2>&1 \
  | grep -E "step" | tee -a $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
