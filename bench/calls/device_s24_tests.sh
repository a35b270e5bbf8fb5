#!/usr/bin/env bash
# Session 24: every GPU test module at the session's route (down on variant 49), by session 19's call.
#   bash bench/calls/device_s24_tests.sh     (carry .whl with pytest-timeout; ~7 minutes)
exec bash bench/calls/device_s19_tests.sh "$@"
