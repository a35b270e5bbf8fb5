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
# gpu_tests NAME SECONDS PYTEST-ARGS...: pytest with at most SECONDS (and what is left of $BUDGET), its output in
# $out/NAME.log; prints the exit status, the time left, and the failures and summary lines.
gpu_tests() {
  local name=$1 secs=$2; shift 2
  (( secs > $(left) - 10 )) && secs=$(( $(left) - 10 ))
  timeout "$secs" python3 -m pytest -q -p no:cacheprovider -rfE "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/$name.log" | tail -20
}
# whole_suite NAME [HALF]: every native GPU test module and the plan's tests (the timing probes deselected) with what
# is left of $BUDGET, into $out/NAME.log; prints the exit status, the time left, and the failures and summary lines.
# HALF 1 or 2 runs every other module of the sorted list (the whole suite took ~430 s on an H100 in session 46, more
# than one call holds beside a cold build: run half 1 in the building call and half 2 in a warm follow-up).
whole_suite() {
  local files=(tests/test_native*.py tests/test_plan.py)
  if [[ ${2:-} == 1 || ${2:-} == 2 ]]; then
    local half=() i
    for i in "${!files[@]}"; do (( i % 2 == $2 - 1 )) && half+=("${files[$i]}"); done
    files=("${half[@]}")
  fi
  timeout $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider -rfE "${files[@]}" -k "not timing_probe" \
    > "$out/$1.log" 2>&1
  echo "suite rc=$? ($(left) s left)"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/$1.log" | tail -20
}
