#!/usr/bin/env bash
# Session 24, call 5 (no new code): with down now spread (variant 49), the 5120 x 6144 outputs (gdn_out, o) on the
# kernels already built: 41 / 42 (4 rows a warp, 2 / 1 batches before the wait: 320 blocks at 4 an SM, so all of
# gdn_out's blocks fit the 84 SMs the GDN step leaves free), 39 / 40 (PRE 1 / 0), 36 and 49; gate_up on 34 against 37;
# down back on 36. Whole steps alternating with the built-in route; the timeline of the best.
#   bash bench/calls/device_s24_call5.sh     (carry .whl; ~4 minutes)
set -uo pipefail
source bench/device_setup.sh
base="5120x17408=49"
probe() { timeout 400 python3 bench/step_probe.py --kv int8 --depths 0,131072 "$@" 2>&1 | grep -E "recipe|step|Error|error" \
  | tee -a $out/steps.txt; }
o="5120x6144"
probe --routes "$base;$o=41;$o=42;$o=40;$base;$o=39;$o=36;$o=49;$base;34816x5120=34;5120x17408=36;$o=41;$o=42;$base"
for r in "$base" "$o=41" "$o=42"; do
  timeout 90 python3 bench/step_timeline.py --kv int8 --steps 6 --pdl 1 --depth 0 --route "$r" 2>&1 | grep -v Warn \
    | tail -14 | tee -a $out/timeline.txt
done
echo "total $(( $(date +%s) - t0 )) s"
