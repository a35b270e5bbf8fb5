#!/usr/bin/env bash
# Session 43, call 1, for whichever card comes: the pipelined tensor-core GEMV's and the reduce-norm's op tests, the
# shape sweep and the tests under the best (bench/calls/device_s43_pipe.sh). (Written first to run the H200 decode
# record, bench/calls/device_s41_h200.sh, when an H200 came; after an hour of refused starts too little device time
# was left for both, and the record's code path, T = 1, has not changed since the H100 record of session 42.)
#   MONORAIL_COMMIT=<sha> [BUDGET=seconds] bash bench/calls/device_s43_call1.sh     (carry .whl)
set -uo pipefail
exec bash bench/calls/device_s43_pipe.sh
