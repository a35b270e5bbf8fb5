#!/usr/bin/env bash
# Session 8, call 2: boundary_probe --smflat (one block per SM streaming a contiguous run of whole rows, against the
# grid-strided flat stream and the row-per-warp patterns); GEMV variants 34..37 (the same pattern with the integer
# dot): their tests, the isolated table, and whole steps with them routed in.
set -uo pipefail
echo "record of session 8 call 2: GEMV variants 34..37 were the smflat kernel, removed after it; today 34 / 35 are other kernels (bench/NOTES.md)"; exit 2
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 150 /tmp/bp --smflat > $out/smflat.txt 2>&1; cat $out/smflat.txt
source bench/device_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "qgemv" 2>&1 | tail -4
timeout 100 python3 bench/gemv_probe.py --bits 4 --variants 0,4,29,30,34,35,36,37 --reps 30 2>&1 | tee $out/gemv.txt | tail -14
G=34816x5120; D=5120x17408; O=5120x6144; I=16480x5120; Q=14336x5120; L=248320x5120
R="$D=34;$D=35;$D=36;$D=37;$O=34;$O=35;$O=36;$O=37;$G=34;$G=35;$G=36;$I=34,$Q=34;$I=35,$Q=35;$I=36,$Q=36;$L=35"
R="$R;$D=34,$O=34,$G=34,$I=34,$Q=34,$L=34;$D=35,$O=35,$G=35,$I=35,$Q=35,$L=35;$D=36,$O=36,$G=36,$I=36,$Q=36,$L=36"
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0 --routes "$R" 2>&1 | grep step | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
