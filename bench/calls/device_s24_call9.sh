#!/usr/bin/env bash
# Session 24, call 9 (the last 81 s of device time, on call 8's still-warm machine): bench/decode.py --quick at the
# conv-ring commit, without the llama.cpp peers (no time left for them). Not the record: call 8's machine ran the
# built-in route 1.4 % slower than the final call's (bench/NOTES.md).
#   bash bench/calls/device_s24_call9.sh     (carry .whl; ~1 minute on a warm machine)
source bench/device_setup.sh; timeout 62 python3 bench/decode.py --out $OUT/decode-h200-ring.json --quick > $OUT/decode.log 2>&1; echo rc=$?; grep -E "copy bandwidth|\"depth\"" $OUT/decode.log | cut -c1-140
