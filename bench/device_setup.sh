# Sourced by the device-call scripts: output folder, the wheels the device lacks (.whl/, carried), and
# the native build for the local GPU. Sets $out and $t0; exits the caller when the build fails.
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
t0=$(date +%s)
# The device keeps build/ between calls but re-sends the sources with their old modification times, so a file a
# previous call changed there (a patch applied on the device) and this call restored looks older than its object and
# would not be recompiled. Touch every source whose content differs from what the last build here compiled.
stamp=build/.source-hashes
if [ -f "$stamp" ]; then
  find csrc CMakeLists.txt -type f | sort | xargs sha1sum | diff - "$stamp" | sed -n 's/^< [0-9a-f]*  //p' | xargs -r touch
fi
# The local GPU's architecture (sm_90 on the device; CMakeLists.txt asks nvidia-smi when the list is empty).
MONORAIL_CUDA_ARCHS=${MONORAIL_CUDA_ARCHS:-} python3 -m pip install -q --no-build-isolation --no-deps -e . > "$out/build.log" 2>&1 \
  || { echo "BUILD FAILED"; grep -E "error|Error" "$out/build.log" | head -30; exit 1; }
mkdir -p build && find csrc CMakeLists.txt -type f | sort | xargs sha1sum > "$stamp"
echo "build: $(( $(date +%s) - t0 )) s"
# Each object's compile time (ninja's log: start and end in ms), to see what bounds a cold build on the device.
for log in build/*/.ninja_log; do
  [ -f "$log" ] && awk -F'\t' 'NR > 1 { printf "%7.1f s  %s\n", ($2 - $1) / 1000, $4 }' "$log" | sort -rn > "$out/build-times.txt"
done
