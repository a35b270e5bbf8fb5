#!/usr/bin/env bash
# Session 12, call 6: one L1 / shared-memory split for every kernel of the step (set_step_smem_carveout). Calls 4-5:
# a GEMV with 25 KB of shared memory a block on gdn_out / o made every other role slower too, as if SMs changed
# their split around it; if the step's kernels already want different splits, their PDL overlap is lost at each
# change. Whole steps at carveouts -1 (each kernel's own), 0, 25, 50, 100; the preload route at 100.
#   bash bench/calls/device_s12_call6.sh     (carry .whl)
set -uo pipefail
source bench/device_setup.sh
timeout 200 python3 bench/step_probe.py --kv int8 --depths 0,131072 --carveouts=-1,0,25,50,100 \
  --routes "5120x6144=36" --routes-carveout 100 2>&1 | grep -E "step|Error|error" | tee $out/steps.txt
echo "total $(( $(date +%s) - t0 )) s"
