#!/usr/bin/env bash
# Session 19, call 9 (written, not run: the session's device time ran out): call 8 again, now that
# bench/step_anatomy.py also prints the tail by SM (sm_lag_report: is it the same SMs that end last in every GEMV?).
#   bash bench/calls/device_s19_call9.sh     (carry .whl; ~2.5 minutes)
exec bash bench/calls/device_s19_call8.sh
