#!/usr/bin/env bash
# Written in session 15 for the next one: why the 5120-row GEMVs (down, gdn_out / o) stream at ~2.7 / ~2.2 TB/s on
# every kernel tried. Isolated timings (bench/gemv_probe.py: back-to-back launches from DRAM, no PDL) of down's K with
# half, the same and twice its rows, and gdn_out's K likewise, on the route's kernel (36 for K > 8192, 4 otherwise)
# and on gate_up's (37): if the time grows with the rows at a fixed cost per launch, the rows' rate is fine and the
# loss is per launch; if the rate itself stays low at twice the rows, it is the long rows.
#   bash bench/calls/device_s16_call2.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
shapes="down_half=2560x17408,down=5120x17408,down_double=10240x17408,out_half=2560x6144,out=5120x6144"
shapes="$shapes,out_double=10240x6144,out_quad=20480x6144,gate_up=34816x5120"
timeout 300 python3 bench/gemv_probe.py --bits 4 --variants 0,4,36,37 --shapes "$shapes" --reps 40 \
  --json $out/gemv-shapes.json 2>&1 | tee $out/gemv-shapes.txt
echo "total $(( $(date +%s) - t0 )) s"
