#!/usr/bin/env bash
# Session 33, call 1: session 32's score-quanta patch (bench/patches/finish-wide-score-quanta.patch) with its baseline
# timed on the same warm card first, since the device kind may come up as an H100 or an H200. It ran once (H100;
# bench/results/*-s33-call1.*); the patch did not land and is gone from the tree. To run this again, restore it first:
#   git show 764f793:bench/patches/finish-wide-score-quanta.patch > bench/patches/finish-wide-score-quanta.patch
#  0. baseline (main as committed): each sampler kernel's ncu duration, flat and broad rows, and sampler_time;
#  1-4. the patch applied: bench/calls/device_s32_call3.sh's sequence (ncu durations, finish's SASS page,
#     sampler_time, the sampler and token-loop tests). Prediction (from 764f793's device_s32_quanta.sh): flat
#     finish 132.5 -> 80-100 us, flat narrow +1-4 us, flat top-p 0.9 draw 178 -> 125-150 us.
#   bash bench/calls/device_s33_call1.sh     (carry .whl; ~6 minutes)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/base
bash bench/ncu_sampler_durations.sh /tmp/base flat broad
cat /tmp/base/ncu-sampler-flat.txt /tmp/base/ncu-sampler-broad.txt > $out/ncu-sampler-baseline.txt
timeout 60 python3 bench/sampler_time.py --reps 100 --json $out/sampler-time-baseline.json > /tmp/base/st.log 2>&1
echo "baseline sampler_time rc=$?"; grep -E '"flat"|"broad"' /tmp/base/st.log | grep -E "top-p|min-p|temperature"
git apply bench/patches/finish-wide-score-quanta.patch || { echo "PATCH DID NOT APPLY"; exit 1; }
echo "=== patched ==="
bash bench/calls/device_s32_call3.sh
rm -f $out/sampler-time.log
ls $out
