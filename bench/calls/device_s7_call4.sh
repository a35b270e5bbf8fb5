#!/usr/bin/env bash
# Session 7, call 4: the probe per shape with no x staged (more row-major patterns); GEMV variants 31..33 (one block
# of 20 warps per SM for the 5120-row shapes): tests, isolated table, whole steps (on top of call 3's best route).
# Never ran: three starts were refused; its whole-step part ran in bench/calls/device_s7_final.sh, the probe part (the
# "no x staged, one shape at a time" section of boundary_probe.cu) has not run on a GPU.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && timeout 100 /tmp/bp > $out/boundary4.txt; sed -n '/no x staged, one shape/,$p' $out/boundary4.txt
source bench/device_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "31 or 32 or 33" 2>&1 | tail -3
timeout 100 python3 bench/gemv_probe.py --bits 4 --variants 0,4,6,31,32,33 --reps 30 2>&1 | tee $out/gemv.txt | tail -10
G=34816x5120; I=16480x5120; Q=14336x5120; L=248320x5120; D=5120x17408; O=5120x6144
B="$G=29,$I=30,$Q=30,$L=29"
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0 --routes "$B;$B,$D=31;$B,$D=32;$B,$D=33;$B,$O=31;$B,$O=32;$B,$O=33;$B,$D=6" 2>&1 | grep step
echo "total $(( $(date +%s) - t0 )) s"
