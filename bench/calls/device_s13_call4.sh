#!/usr/bin/env bash
# Session 13, call 4: gdn_out and the attention output on variant 36 (variant 4 with the whole row pair loaded into
# registers before the PDL wait, while the latency-bound GDN step / combine runs), the route of this tree. Its GEMV
# tests; whole steps on the route against 5120x6144 back on variant 4 (twice each); the per-role timeline; then, if
# the route won at depth 0 by at least 0.015 ms in both pairs, the decode benchmark and llama.cpp's q8_0 peer in the
# time left (else the session's final call's benchmark stands).
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s13_call4.sh     (carry .whl, .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-480} - ($(date +%s) - start) )); }
source bench/device_setup.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py \
  -k "qgemv and not timing_probe" > $out/tests.log 2>&1
echo "gemv tests rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" $out/tests.log | head -12
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0,131072 --routes "5120x6144=4;5120x6144=36;5120x6144=4" \
  2>&1 | grep -E "step|Error|error" | tee $out/steps.txt
timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --json $out/timeline.json \
  > $out/timeline.txt 2>&1; echo "timeline rc=$?"; grep -A14 "increments" $out/timeline.txt | head -14
won=$(python3 - "$out/steps.txt" <<'PY'
import re, sys
ms = {}
for line in open(sys.argv[1]):
    m = re.search(r"step kv int8 (.*) depth 0: ([0-9.]+) ms", line)
    if m:
        ms.setdefault("4" if "=4" in m.group(1) else "36", []).append(float(m.group(2)))
a, b = ms.get("36", []), ms.get("4", [])  # the route's first line and 5120x6144=36 count as 36
print(int(len(a) >= 2 and len(b) >= 2 and max(a) + 0.015 <= min(b)))
PY
)
echo "route won: $won ($(left) s left)"
if [[ "$won" == 1 && $(left) -gt 200 ]]; then
  timeout $(( $(left) - 70 )) python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
  echo "decode rc=$? ($(left) s left)"
  grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out" $out/decode.log | head -14
  if [[ -d .peer && $(left) -gt 50 ]]; then
    timeout $(( $(left) - 5 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
      > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
    echo "peer q8_0 rc=$? ($(left) s left)"
  fi
fi
echo "total $(( $(date +%s) - start )) s"
