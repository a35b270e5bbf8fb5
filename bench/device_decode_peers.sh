# Sourced by the final-call scripts (after bench/device_setup.sh, with a left() that prints the seconds the call has
# left): decode_and_peers MIN runs bench/decode.py --quick into $out/decode-h200.json, then, when .peer was carried
# and more than MIN seconds are left, llama.cpp's decode peer (tg64, f16 and q8_0 KV at depths 0, 8K, 32K) and
# fills its figures into the same file (128K from the shared peer file).
decode_and_peers() {
  local min=$1
  timeout 230 python3 bench/decode.py --out $out/decode-h200.json --quick > $out/decode.log 2>&1
  echo "decode rc=$? ($(left) s left)"; grep -E "copy bandwidth|\"depth\"|without PDL|leave-one-out" $out/decode.log | head -16
  if [[ -d .peer && $(left) -gt $min ]]; then
    timeout 110 bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 > "$out/llamacpp-f16.json" 2>> "$out/peer.log"
    echo "peer f16 rc=$? ($(left) s left)"
    timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) bash .peer/llamacpp-peer.sh -fa on -p 0 -n 64 -d 0,8192,32768 -r 1 -ctk q8_0 -ctv q8_0 \
      > "$out/llamacpp-q8.json" 2>> "$out/peer.log"
    echo "peer q8_0 rc=$? ($(left) s left)"
    python3 bench/decode.py --out "$out/decode-h200.json" --fill-peers-only --llamacpp-f16 "$out/llamacpp-f16.json" \
      --llamacpp-q8 "$out/llamacpp-q8.json" --shared-peer .peer/llamacpp-h200.json | head -c 1500; echo
  fi
}
