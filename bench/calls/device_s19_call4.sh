#!/usr/bin/env bash
# Session 19, call 4: the GPU's clocks and power while the decode step runs (bench/clock_probe.py), against idle and
# a plain device copy: is the step's latency-bound share slowed by a lower SM clock (power limit) in the step?
#   bash bench/calls/device_s19_call4.sh     (carry .whl; ~3 minutes)
set -uo pipefail
source bench/device_setup.sh
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > $out/smi-q-before.txt 2>&1
reasons=clocks_event_reasons.active
nvidia-smi --help-query-gpu 2>/dev/null | grep -q "clocks_event_reasons.active" || reasons=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
  --format=csv,noheader,nounits -lms 100 > $out/smi.csv 2> $out/smi.err &
smi=$!
timeout 200 python3 bench/clock_probe.py --marks $out/marks.txt --seconds 4 2>&1 | tail -8
kill $smi 2>/dev/null; wait $smi 2>/dev/null
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > $out/smi-q-after.txt 2>&1
python3 bench/clock_probe.py --summarize $out/smi.csv --marks $out/marks.txt | tee $out/clocks.txt
grep -E "Power Limit|Max Clocks|SM  |Memory  |Active|Idle|Power Cap|Slowdown" $out/smi-q-before.txt | head -24
echo "total $(( $(date +%s) - t0 )) s"
