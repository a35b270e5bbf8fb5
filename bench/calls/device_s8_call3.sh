#!/usr/bin/env bash
# Session 8, call 3: x staged in one round of loads (stage_xq<P>); variants 31 / 32 on down and gdn_out again with it;
# decode attention variants 5 / 6 (3 / 4 warps per block), their tests and the 128K timing probe; Nsight Compute
# counters of the attention split kernel at 128K (int8 KV).
set -uo pipefail
echo "record of session 8 call 3: the one-round x staging it measured was reverted after it (bench/NOTES.md)"; exit 2
source bench/device_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 90 tests/test_native_ops.py -k "qgemv" 2>&1 | tail -3
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE --timeout 120 -s tests/test_native_attn_decode.py 2>&1 | grep -E "attention decode|passed|failed|FAILED|ERROR" | head -30
G=34816x5120; D=5120x17408; O=5120x6144; I=16480x5120; Q=14336x5120
timeout 150 python3 bench/step_probe.py --kv int8 --depths 0 --routes "$D=31;$D=32;$O=31;$O=32;$D=31,$O=31;$D=32,$O=32;$D=33" 2>&1 | grep step | tee $out/steps.txt
timeout 100 ncu --clock-control none -k regex:attn_split_v4 --launch-skip 2 --launch-count 1 --section SpeedOfLight \
  --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis python3 bench/ncu_attn.py 1 4 > $out/ncu-attn-int8-v4.txt 2>&1
echo "ncu rc=$?"; grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|Stall|Grid Size|Waves Per SM|L2 Hit|Mem Busy|Max Bandwidth" $out/ncu-attn-int8-v4.txt | head -30
echo "total $(( $(date +%s) - t0 )) s"
