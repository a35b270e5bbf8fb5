#!/usr/bin/env bash
# Session 26, call 2: the fallback's exact tie rule (top-k over penalised logits, ties at the k-th logit and at the
# top-p boundary cut in id order, as the host cuts them): the sampler / loop tests, the draw's cost by mode, and the
# app's token loop, by session 25's call 8.
#   bash bench/calls/device_s26_call2.sh     (carry .whl; ~4 minutes)
exec bash bench/calls/device_s25_call8.sh "$@"
