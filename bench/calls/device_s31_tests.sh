#!/usr/bin/env bash
# Session 31, call 2: every GPU test module on the session's tree (the first full run since c60e271, session 24, and
# the first with the wide select and top-k narrowing on by default).
#   bash bench/calls/device_s31_tests.sh     (carry .whl; ~7 minutes)
exec bash bench/calls/device_s19_tests.sh "$@"
