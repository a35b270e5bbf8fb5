#!/usr/bin/env bash
# Session 25, final call: the decode benchmark of record at this commit and both llama.cpp decode peers in the same
# call (as device_s24_final.sh), then the app's token loop (bench/token_loop.py) on the same machine.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s25_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - start) )); }
source bench/device_setup.sh
source bench/device_decode_peers.sh
decode_and_peers 100
timeout 150 python3 bench/token_loop.py --tokens 64 --json $out/token-loop.json 2>&1 | tail -4
echo "total $(( $(date +%s) - start )) s"
