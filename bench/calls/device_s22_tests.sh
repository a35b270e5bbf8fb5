#!/usr/bin/env bash
# Session 22: every GPU test module at HEAD (the default build's PTX as 9873ce4's; the stamps' macros since), by
# session 19's call (the same pytest command; .whl must hold pytest-timeout beside the tokenizer and xxhash wheels).
#   bash bench/calls/device_s22_tests.sh     (carry .whl; ~6 minutes)
exec bash bench/calls/device_s19_tests.sh "$@"
