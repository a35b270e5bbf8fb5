#!/usr/bin/env bash
# Each sampler kernel's own duration under Nsight Compute for top-p 0.9 on the given rows of bench/sampler_time.py
# (bench/ncu_sampler.py, 3 draws): the full ncu output in $out/ncu-sampler-<row>.txt, the last draw's kernels printed.
#   bash bench/ncu_sampler_durations.sh <out folder> flat [broad ...]
out=$1; shift
for row in "$@"; do
  timeout 60 ncu --clock-control none -k regex:sample_ --metrics gpu__time_duration.sum \
    python3 bench/ncu_sampler.py "$row" "no top-k, top-p 0.9" 3 > "$out/ncu-sampler-$row.txt" 2>&1
  echo "ncu $row rc=$?"
  grep -E "sample_[a-z_]+kernel|gpu__time_duration" "$out/ncu-sampler-$row.txt" | sed 's/  */ /g' | paste - - | tail -4
done
