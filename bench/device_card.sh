# Sourced by the device-call scripts that run the decode record when the card is an H200 and their own work on any
# other card: prints the card; on an H200 replaces the caller with bench/calls/device_s41_h200.sh (the record and both
# llama.cpp peers); elsewhere sets $start, left() (the seconds left of $BUDGET, which the caller defaults) and $gpu
# (the card's short name, e.g. h100), and builds the native module (bench/device_setup.sh, which sets $out).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $name"
if [[ $name == *H200* ]]; then
  exec bash bench/calls/device_s41_h200.sh
fi
start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - start) )); }
gpu=$(echo "$name" | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
source bench/device_setup.sh
