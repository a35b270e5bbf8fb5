# Sourced by the device-call scripts: output folder, the wheels the device lacks (.whl/, carried), and
# the native build for sm_90. Sets $out and $t0; exits the caller when the build fails.
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
t0=$(date +%s)
MONORAIL_CUDA_ARCHS=90 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$out/build.log" 2>&1 \
  || { echo "BUILD FAILED"; grep -E "error|Error" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
