"""Prefill benchmark of the native engine on random 27B-shaped weights (run on the GPU machine).

    python bench/prefill.py --out bench/results/prefill-h200.json [--llamacpp llama-bench.json]
                            [--prompts 8192,32768,131072,262144] [--chunk 1024]

For each whole prompt (random token ids, int8 KV, one lane, cache empty at the start) the engine's
prefill path is timed end to end (wall clock around NativeEngine.prefill, which synchronises): the
tensor-core GEMMs, chunked GDN and flash attention, in chunks of --chunk tokens. The same prompt is
run again with attention left out (the engine's benchmark-only skip mask), which gives the attention
share of the time. The GEMMs' achieved TFLOP/s come the same way: the time of the prompt with every
GEMM left out is subtracted from the full time, against 2 x tokens x (sum of every layer's N x K).
The tensor-core peak is an 8192-cube bf16 matmul through torch in the same call.
llama.cpp: its marginal pp2048 rate at the nearest depth, from llama-bench JSON produced in the same
device call (depths it ran) or else the shared peer file (same build and method).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import time

PROMPTS = (8192, 32768, 131072, 262144)
SKIP_ATTENTION = 8
SKIP_GEMMS = 16 | 32


def matmul_peak_tflops(n: int = 8192, reps: int = 10) -> float:
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        a @ b
    e.record()
    torch.cuda.synchronize()
    sec = s.elapsed_time(e) / reps / 1e3
    del a, b
    torch.cuda.empty_cache()
    return 2 * n ** 3 / sec / 1e12


def gemm_flops_per_token(cfg) -> int:
    """2 x (sum of N x K over every projection the prefill multiplies: all layers, no lm_head)."""
    t = cfg.text
    h, inter = t.hidden_size, t.intermediate_size
    total = 0
    for i in range(t.num_hidden_layers):
        if t.is_full_attention(i):
            qkv = 2 * t.num_attention_heads * t.head_dim + 2 * t.num_key_value_heads * t.head_dim
            total += qkv * h + h * t.num_attention_heads * t.head_dim
        else:
            rows = t.linear_conv_dim + t.linear_v_dim + 2 * t.linear_num_value_heads
            total += rows * h + h * t.linear_v_dim
        total += 2 * inter * h + h * inter
    return 2 * total


def time_prefill(engine, n: int, seed: int, skip: int = 0) -> float:
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 240000, (n,), generator=g).tolist()
    engine.set_skip_mask(skip)
    engine.reset_lane(0)
    engine.synchronize()
    t0 = time.perf_counter()
    engine.prefill(0, ids, [], 0)
    sec = time.perf_counter() - t0
    engine.set_skip_mask(0)
    return sec


def peer_pp(path: str | None, shared: str | None) -> tuple[dict[int, float], dict[int, float]]:
    """(this call's pp2048 by depth, the shared file's pp2048 by depth), q8_0 KV where available."""
    this, other = {}, {}
    if path and os.path.exists(path):
        try:
            for r in json.load(open(path)):
                if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
                    this[int(r.get("n_depth", 0))] = round(float(r["avg_ts"]), 1)
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
    if shared and os.path.exists(shared):
        for r in json.load(open(shared))["rows"]:
            if r["test"].startswith("pp") and r["kv"] == "q8_0":
                other[int(r["depth"])] = r["tok_s"]
    return this, other


def nearest(table: dict[int, float], depth: int):
    if not table:
        return None, None
    d = min(table, key=lambda k: abs(k - depth))
    return d, table[d]


def fill_peer(row: dict, this_peer: dict[int, float], shared_peer: dict[int, float]) -> None:
    """The peer figure at the nearest depth; this call's run wins ties with the shared file."""
    n = row["prompt_tokens"]
    depth, peer = nearest(this_peer, n)
    source = "this device call" if peer is not None else None
    d2, p2 = nearest(shared_peer, n)
    if p2 is not None and (peer is None or abs(n - d2) < abs(n - depth)):
        depth, peer, source = d2, p2, "shared/peers/llamacpp-h200.json (same build and method)"
    row.update(llamacpp_tok_s=peer, llamacpp_depth=depth, llamacpp_source=source)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/prefill-h200.json")
    ap.add_argument("--prompts", default=",".join(str(p) for p in PROMPTS))
    ap.add_argument("--chunk", default="auto",
                    help="prefill chunk tokens, or 'auto': what the engine picks, the largest whose plan fits "
                         "the --budget-gib budget at the largest prompt (engine.plan.fit_prefill_chunk)")
    ap.add_argument("--budget-gib", type=float, default=24.0, help="VRAM budget of the simulated card")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the first prompt with each op class left out (norms, conv, GDN, attention, "
                         "MLP GEMMs, mixer GEMMs): the difference is that class's share")
    ap.add_argument("--overlap-probe", action="store_true",
                    help="also time the first prompt with the GEMM's dequant/GEMM overlap switched off")
    ap.add_argument("--chunks-probe", default="", help="also time the first prompt at these chunk sizes")
    ap.add_argument("--llamacpp", help="llama-bench JSON (q8_0 KV, pp2048) from this device call")
    ap.add_argument("--shared-peer", default=None, help="the shared llama.cpp peer file")
    ap.add_argument("--no-share", action="store_true", help="skip the attention-left-out runs (smoke test)")
    ap.add_argument("--fill-peers-only", action="store_true",
                    help="only fill the llama.cpp fields of an existing --out file")
    args = ap.parse_args()
    if args.fill_peers_only:
        result = json.load(open(args.out))
        this_peer, shared_peer = peer_pp(args.llamacpp, args.shared_peer)
        for row in result["rows"]:
            fill_peer(row, this_peer, shared_peer)
        result["llamacpp_pp2048_this_call"] = this_peer
        json.dump(result, open(args.out, "w"), indent=1)
        print(json.dumps(result["rows"]))
        return 0

    import torch
    from engine.native_backend import NativeModel
    from engine.registry import config_27b

    prompts = [int(p) for p in args.prompts.split(",") if p]
    budget = int(args.budget_gib * (1 << 30))
    chunk = None if args.chunk == "auto" else int(args.chunk)  # None: the engine picks (fit_prefill_chunk)
    peak = matmul_peak_tflops()
    print(f"bf16 8192^3 matmul through torch: {peak:.0f} TFLOP/s", flush=True)
    cfg = config_27b(vision=False)
    flops_tok = gemm_flops_per_token(cfg)
    this_peer, shared_peer = peer_pp(args.llamacpp, args.shared_peer)

    probes = []
    for c in [int(x) for x in args.chunks_probe.split(",") if x]:
        model = NativeModel.random_27b(kv_dtype="int8", max_context=prompts[0] + 64, seed=1, prefill_chunk=c,
                                       vram_budget_bytes=budget)
        time_prefill(model.engine, min(prompts[0], 2 * c), 0)  # warm (cuBLAS heuristics, caches)
        sec = time_prefill(model.engine, prompts[0], 1)
        probes.append({"chunk": c, "prompt_tokens": prompts[0], "tok_s": round(prompts[0] / sec, 1)})
        print(f"chunk {c}: {prompts[0]} tokens in {sec:.2f} s = {prompts[0] / sec:.0f} tok/s", flush=True)
        del model
        gc.collect()
        torch.cuda.empty_cache()

    model = NativeModel.random_27b(kv_dtype="int8", max_context=max(prompts), seed=1, prefill_chunk=chunk,
                                   vram_budget_bytes=budget)
    e = model.engine
    chunk = e.prefill_chunk
    print(f"prefill chunk {chunk} ({args.chunk}), budget {args.budget_gib} GiB", flush=True)
    time_prefill(e, min(prompts[0], 2 * chunk), 0)  # warm
    breakdown = None
    if args.breakdown:
        base = time_prefill(e, prompts[0], 1)
        breakdown = {"prompt_tokens": prompts[0], "seconds": round(base, 3)}
        for name, bit in (("rmsnorm", 1), ("conv", 2), ("gdn", 4), ("attention", 8), ("mlp_gemm", 16),
                          ("mixer_gemm", 32)):
            breakdown[name] = round(base - time_prefill(e, prompts[0], 1, bit), 3)
        breakdown["rest"] = round(base - sum(v for k, v in breakdown.items() if k not in ("prompt_tokens", "seconds")), 3)
        print("breakdown (s): " + json.dumps(breakdown), flush=True)
    overlap_probe = None
    if args.overlap_probe:
        from engine.native import load_native
        nat = load_native()
        nat.set_qgemm_overlap(False)
        try:
            off = time_prefill(e, prompts[0], 1)
        finally:
            nat.set_qgemm_overlap(True)
        on = time_prefill(e, prompts[0], 1)
        overlap_probe = {"prompt_tokens": prompts[0], "seconds_overlap_off": round(off, 3),
                         "seconds_overlap_on": round(on, 3)}
        print(f"dequant/GEMM overlap: off {off:.3f} s, on {on:.3f} s ({prompts[0]} tokens)", flush=True)
    # GEMM rate in place: the first prompt with and without every GEMM
    n0 = prompts[0]
    full0 = time_prefill(e, n0, 1)
    no_gemm = time_prefill(e, n0, 1, SKIP_GEMMS)
    gemm_sec = full0 - no_gemm
    gemm_tflops = flops_tok * n0 / gemm_sec / 1e12
    print(f"GEMMs at chunk {chunk}: {gemm_sec:.2f} of {full0:.2f} s for {n0} tokens = {gemm_tflops:.0f} TFLOP/s "
          f"({gemm_tflops / peak:.0%} of the matmul peak)", flush=True)
    from provenance import commit as run_commit, write_result  # bench/ is the script's directory, on sys.path

    commit = run_commit()
    result = {"gpu": torch.cuda.get_device_name(0), "commit": commit, "date": dt.date.today().isoformat(),
              "tensor_core_peak_tflops": round(peak, 1), "rows": [], "chunk_probe": probes,
              "budget_gib": args.budget_gib, "chunk": chunk, "overlap_probe": overlap_probe, "breakdown": breakdown,
              "gemm_flops_per_token": flops_tok, "gemm_seconds_first_prompt": round(gemm_sec, 3),
              "method": ("whole prompt through NativeEngine.prefill, wall clock, random weights and tokens, int8 KV; "
                         "attention share and GEMM time from runs with those ops left out; llamacpp_tok_s is "
                         "llama.cpp's marginal pp2048 rate (q8_0 KV) at the nearest depth")}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    for n in prompts:
        sec = full0 if n == n0 else time_prefill(e, n, 2)
        share = None
        if not args.no_share:
            no_attn = time_prefill(e, n, 2, SKIP_ATTENTION)
            share = round(max(0.0, sec - no_attn) / sec, 3)
        row = {"prompt_tokens": n, "kv": "int8", "tok_s": round(n / sec, 1), "seconds": round(sec, 2),
               "gemm_tflops": round(gemm_tflops, 1), "attention_share": share, "chunk": chunk}
        fill_peer(row, this_peer, shared_peer)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        write_result(args.out, result)  # after every row: a cut-short run keeps what it measured
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
