#!/usr/bin/env bash
# Session 24, final call: the decode benchmark of record at this commit (down routed to variant 49) and both llama.cpp
# decode peers (f16 and q8_0 KV, depths 0 / 8K / 32K) in the same call, filled into the same file.
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s24_final.sh     (carry .whl and .peer)
set -uo pipefail
start=$(date +%s)
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - start) )); }
source bench/device_setup.sh
source bench/device_decode_peers.sh
decode_and_peers 100
echo "total $(( $(date +%s) - start )) s"
