"""Decode benchmark of the native engine on random 27B-shaped weights (run on the GPU machine).

    python bench/decode.py --out bench/results/decode-h200.json [--llamacpp-f16 f16.json --llamacpp-q8 q8.json]

For bf16 and int8 KV (--kv: int4 too) and depths 0, 8K, 32K, 128K: the T=1 decode step is captured as a CUDA graph
and replayed (median of several timed batches); bytes per step = streamed weights (everything but
the embedding) + GDN state read and write + KV bytes x depth; roofline = measured copy bandwidth /
bytes per step. llama.cpp figures come from llama-bench JSON files produced in the same device call.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics

DEPTHS = (0, 8192, 32768, 131072)


def copy_bandwidth_gbs(nbytes: int = 4 << 30, reps: int = 20) -> float:
    import torch
    a = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / reps / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times) / 1e9  # bytes read + bytes written


GEMV_SHAPES = (("mlp_gate_up", 34816, 5120, 64), ("mlp_down", 5120, 17408, 64), ("gdn_in", 16480, 5120, 48),
               ("gdn_out", 5120, 6144, 48), ("lm_head", 248320, 5120, 1))
VARIANTS = {1: "U2", 2: "U4", 3: "U4 persistent", 4: "U2 pipelined", 5: "U2 pipelined persistent",
            6: "x in shared memory, weights L1::no_allocate", 10: "6 pipelined, 512-thread blocks",
            14: "6 capped at 48 registers", 16: "cp.async ring R2 S4", 17: "cp.async ring R2 S8 128 thr",
            18: "cp.async ring R4 S4", 19: "cp.async ring R2 S3 <= 48 regs",
            23: "integer dot (x as 16-bit integers, dp4a) R4 U2", 27: "integer dot R8 U1",
            29: "23 as one 24-warp block per SM", 30: "27 as one 16-warp block per SM",
            34: "23 as one 22-warp block per SM"}
QUICK_VARIANTS = (1, 4, 6, 29, 30, 34)  # the route's variants (csrc/cuda/qgemv.cu t1_route) and variant 1


def gemv_components(nat, quick: bool = False) -> tuple[list[dict], int]:
    """Time single 4-bit GEMVs of the real shapes (T = 1) for every launch variant; returns the rows
    and the variant with the least time per step (weighted by how often each shape runs)."""
    import torch
    rows = []
    per_step = {v: 0.0 for v in (QUICK_VARIANTS if quick else VARIANTS)}
    for name, n, k, count in GEMV_SHAPES:
        # several weight copies rotate so the 60 MB L2 never holds the matrix between launches
        copies = max(1, min(8, (2 << 30) // (n * k // 2)))
        mats = [(torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda"),
                 (torch.rand(n, k // 64, device="cuda") * 0.01).half()) for _ in range(copies)]
        x = torch.randn(1, k, device="cuda").half()
        out = torch.empty(1, n, device="cuda")
        nbytes = n * k // 2 + n * k // 64 * 2
        for v in (QUICK_VARIANTS if quick else VARIANTS):
            nat.set_qgemv_variant(v)
            ms = statistics.median(statistics.mean(
                nat.op_qgemv_time(c.data_ptr(), 0, sc.data_ptr(), n, k, 4, 64, x.data_ptr(), 1, out.data_ptr(), 50)
                for c, sc in mats) for _ in range(3))
            per_step[v] += ms * count
            rows.append({"matrix": name, "n": n, "k": k, "variant": VARIANTS[v], "us": round(ms * 1e3, 2),
                         "gbs": round(nbytes / ms / 1e6, 1)})
        del mats
    torch.cuda.empty_cache()
    best = min(per_step, key=per_step.get)
    nat.set_qgemv_variant(0)
    return rows, best


def llamacpp_rows(path: str | None, kv: str) -> dict[int, float]:
    if not path or not os.path.exists(path):
        return {}
    try:
        data = json.load(open(path))
    except json.JSONDecodeError:
        return {}
    out = {}
    for r in data:
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            out[int(r.get("n_depth", 0))] = round(float(r["avg_ts"]), 1)
    return out


def llamacpp_peers(args) -> dict[str, dict[int, float]]:
    """Decode tok/s by depth of each KV format's llama.cpp peer (f16 for bf16, q8_0 for int8, q4_0 for int4)."""
    return {"bf16": llamacpp_rows(args.llamacpp_f16, "f16"), "int8": llamacpp_rows(args.llamacpp_q8, "q8_0"),
            "int4": llamacpp_rows(args.llamacpp_q4, "q4_0")}


def _gpu_model(name: str) -> str:
    """'NVIDIA H200 (driver ...)' and 'NVIDIA H200' -> 'h200'; 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    words = name.replace("NVIDIA", "").split()
    return words[0].lower() if words else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="default bench/results/decode-h200.json, or decode-h200-<recipe>.json for another "
                                  "--recipe than q4g64 (the benchmark of record is q4g64)")
    ap.add_argument("--llamacpp-f16")
    ap.add_argument("--llamacpp-q8")
    ap.add_argument("--llamacpp-q4", help="llama-bench JSON with q4_0 KV, the peer of the int4 rows")
    ap.add_argument("--kv", default="bf16,int8",
                    help="KV formats to time, comma-separated (bf16, int8, int4; the issue's benchmark is bf16,int8)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--depths", default=",".join(str(d) for d in DEPTHS))
    ap.add_argument("--quick", action="store_true",
                    help="final-run mode: the GEMV route by shape only, attention variants 0 (the gate's reference), 4 and "
                         "6 only, leave-one-out and profile at depth 0 and the deepest depth for int8 only")
    ap.add_argument("--recipe", default="q4g64",
                    help="weight formats of the random 27B engine: a uniform qBgG (default q4g64, the benchmark of "
                         "record's) or a converter recipe id such as q4-27b (engine/recipe.py); the roofline counts "
                         "that recipe's bytes")
    ap.add_argument("--shared-peer", help="the shared llama.cpp peer file, for depths not measured in this call")
    ap.add_argument("--fill-peers-only", action="store_true",
                    help="only fill llamacpp_tok_s of an existing --out file from the llama-bench JSON files")
    ap.add_argument("--peer-call", default="this device call",
                    help="where the llama-bench files were measured (when not in the benchmark's own device call)")
    ap.add_argument("--peer-call-f16", help="where the f16 file was measured, when not where --peer-call says")
    args = ap.parse_args()
    if args.out is None:
        suffix = "" if args.recipe == "q4g64" else "-" + args.recipe
        args.out = f"bench/results/decode-h200{suffix}.json"
    if args.fill_peers_only:
        result = json.load(open(args.out))
        peers = llamacpp_peers(args)
        shared = {"bf16": {}, "int8": {}, "int4": {}}
        if args.shared_peer and os.path.exists(args.shared_peer):
            shared_file = json.load(open(args.shared_peer))
            # the shared figures were measured on one GPU model: another card's rows stay without a peer
            same_gpu = _gpu_model(shared_file.get("gpu", "")) == _gpu_model(result.get("gpu", ""))
            for r in shared_file["rows"] if same_gpu else []:
                if r["test"].startswith("tg"):
                    shared["bf16" if r["kv"] == "f16" else "int8"][int(r["depth"])] = r["tok_s"]
        label = {"bf16": args.peer_call_f16 or args.peer_call, "int8": args.peer_call, "int4": args.peer_call}
        for row in result["rows"]:
            row["llamacpp_tok_s"] = peers[row["kv"]].get(row["depth"])
            row["llamacpp_source"] = label[row["kv"]] if row["llamacpp_tok_s"] is not None else None
            if row["llamacpp_tok_s"] is None and row["depth"] in shared[row["kv"]]:
                row["llamacpp_tok_s"] = shared[row["kv"]][row["depth"]]
                row["llamacpp_source"] = "shared/peers/llamacpp-h200.json (same build and method, earlier call)"
        result["llamacpp"] = {"source": "llama-bench (shared/tools/llamacpp-peer.sh)",
                              "f16_call": label["bf16"], "q8_0_call": label["int8"], "q4_0_call": label["int4"],
                              "f16": peers["bf16"], "q8_0": peers["int8"], "q4_0": peers["int4"]}
        json.dump(result, open(args.out, "w"), indent=1)
        print(json.dumps(result["rows"]))
        return 0
    import torch
    from engine.native import load_native
    from engine.native_backend import NativeModel
    from engine.native_recipe import recipe_named
    from engine.plan import streamed_weight_bytes
    from engine.registry import config_27b

    nat = load_native()
    depths = [int(d) for d in args.depths.split(",")]
    bw = copy_bandwidth_gbs()
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    comps, best = gemv_components(nat, args.quick)
    for c in comps:
        print(f"gemv {c['matrix']:<12} {c['n']}x{c['k']} {c['variant']:<24}: {c['us']} us, {c['gbs']} GB/s", flush=True)
    print(f"best single GEMV variant in isolation: {best} ({VARIANTS[best]})", flush=True)
    cfg = config_27b(vision=False)
    recipe = recipe_named(args.recipe, cfg)
    wbytes = streamed_weight_bytes(cfg.text, recipe)
    peers = llamacpp_peers(args)
    rows = []
    profiles = []
    leave_out = []
    attn_variant = {}
    gemv_route = {}
    attn_check = {}
    for kv in args.kv.split(","):
        # a 24 GiB card: the engine's plan must fit that budget (128K bf16 KV: 22.5 GiB)
        model = NativeModel.random_27b(kv_dtype=kv, max_context=max(depths) + 64, seed=1, recipe=recipe,
                                       vram_budget_bytes=24 << 30)
        e = model.engine
        # GEMV launch route for the step: by shape (0) or one variant everywhere, whichever step is fastest
        gt = {}
        for v in ((0,) if args.quick else (0, 1, 4, 6, 16, 17, 18, 19)):  # quick: the by-shape route only
            nat.set_qgemv_variant(v)
            e.reset_graphs()
            gt[v] = statistics.median(e.time_steps(0, 0, args.steps) for _ in range(3))
        gemv_route[kv] = min(gt, key=gt.get)
        nat.set_qgemv_variant(gemv_route[kv])
        e.reset_graphs()
        print(f"GEMV route step times at depth 0 ({kv}): {gt} -> {gemv_route[kv]}", flush=True)
        # attention variant (0 CUDA cores, 1 q in shared memory, 2 scores on tensor cores, 3 scores and
        # values on tensor cores): the fastest at the deepest depth among those whose logits match variant 0
        vt = {}
        ref_logits = None
        for v in ((0, 4, 6) if args.quick else (0, 1, 2, 3, 4, 5, 6)):  # 6: the engine's route for int8 KV
            if kv == "int4" and v in (2, 3):  # built for bf16 and int8 KV only (attn_decode refuses int4 there)
                continue
            nat.set_attn_variant(v)
            e.reset_graphs()
            # gate: the same token on the same state must give the same logits as variant 0
            e.reset_lane(0)
            e.forward(0, [1], [], max(depths))
            lg = torch.from_numpy(e.logits(1)).double()
            if ref_logits is None:
                ref_logits = lg
            err = float((lg - ref_logits).norm() / ref_logits.norm())
            attn_check[f"{kv}:{v}"] = err
            if not err < 2e-2:
                print(f"attention variant {v} ({kv}) disagrees with variant 0: rel err {err:.2e}; not used", flush=True)
                continue
            vt[v] = statistics.median(e.time_steps(0, max(depths), args.steps) for _ in range(3))
        attn_variant[kv] = min(vt, key=vt.get)
        nat.set_attn_variant(attn_variant[kv])
        e.reset_graphs()
        print(f"attention variant times at depth {max(depths)} ({kv}): {vt} -> {attn_variant[kv]}; "
              f"logit rel err vs variant 0: {attn_check}", flush=True)
        for depth in depths:
            ms = statistics.median(e.time_steps(0, depth, args.steps) for _ in range(5))
            tok_s = 1e3 / ms
            nbytes = e.step_bytes(depth)
            roof = bw * 1e9 / nbytes
            row = {"depth": depth, "kv": kv, "tok_s": round(tok_s, 1), "roofline_fraction": round(tok_s / roof, 3),
                   "bytes_per_step": nbytes, "roofline_tok_s": round(roof, 1), "ms_per_step": round(ms, 3),
                   "llamacpp_tok_s": peers[kv].get(depth)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        # programmatic dependent launch (pdl.cuh; sm_90+, so not on RTX 30/40 cards): the same step without it
        if nat.pdl_supported():
            for depth in (0, max(depths)):
                nat.set_pdl(False)
                e.reset_graphs()
                ms_plain = statistics.median(e.time_steps(0, depth, args.steps) for _ in range(5))
                nat.set_pdl(True)
                e.reset_graphs()
                for row in rows:
                    if row["kv"] == kv and row["depth"] == depth:
                        row["ms_per_step_without_pdl"] = round(ms_plain, 3)
                        row["tok_s_without_pdl"] = round(1e3 / ms_plain, 1)
                print(f"without PDL ({kv}, depth {depth}): {ms_plain:.3f} ms = {1e3 / ms_plain:.1f} tok/s", flush=True)
        # in-graph cost of each op class: time the captured step with that class left out
        # (since session 8 the one-token step runs the conv inside the GDN step's kernel: one class, bits 2 | 4)
        classes = {1: "rmsnorm", 6: "gdn conv + step", 8: "attention", 16: "mlp gemv", 32: "mixer gemv"}
        for depth in ((0, max(depths)) if (kv == "int8" or not args.quick) else ()):
            base = statistics.median(e.time_steps(0, depth, args.steps) for _ in range(3))
            costs = {"full_step_ms": round(base, 3)}
            for m, name in classes.items():
                e.set_skip_mask(m)
                costs[name] = round(base - statistics.median(e.time_steps(0, depth, args.steps) for _ in range(3)), 3)
            e.set_skip_mask(0)
            costs["rest (lm_head, embed, gaps)"] = round(base - sum(v for k_, v in costs.items() if k_ != "full_step_ms"), 3)
            leave_out.append({"kv": kv, "depth": depth, "ms": costs})
            print(f"leave-one-out {kv} depth {depth}: {costs}", flush=True)
        # where the time goes: one un-captured step with an event after every op (gaps included)
        for depth in ((0, max(depths)) if (kv == "int8" or not args.quick) else ()):
            prof: dict[str, list[float]] = {}
            for op, ms in e.profile_step(0, depth):
                prof.setdefault(op, []).append(ms)
            total = sum(sum(v) for v in prof.values())
            summary = {op: {"count": len(v), "ms": round(sum(v), 3)} for op, v in
                       sorted(prof.items(), key=lambda kv_: -sum(kv_[1]))}
            profiles.append({"kv": kv, "depth": depth, "total_ms": round(total, 3), "ops": summary})
            print(f"profile {kv} depth {depth}: {total:.3f} ms un-captured", flush=True)
            for op, v in summary.items():
                print(f"   {op:<28} x{v['count']:<4} {v['ms']:8.3f} ms", flush=True)
        # greedy sampling cost on top of the step (not part of the graph)
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        state = model.new_state(64)
        model.forward(torch.tensor([1]), state)
        t0.record()
        for _ in range(20):
            model.sample(state)
        t1.record()
        torch.cuda.synchronize()
        print(f"greedy sample + readback: {t0.elapsed_time(t1) / 20 * 1e3:.1f} us", flush=True)
        del model, e
        gc.collect()
    from provenance import commit as run_commit, write_result  # bench/ is the script's directory, on sys.path

    commit = run_commit()
    result = {"gpu": torch.cuda.get_device_name(0), "commit": commit, "date": dt.date.today().isoformat(),
              "weights_gb_per_token": round(wbytes / 1e9, 3), "copy_bandwidth_gbs": round(bw, 1), "rows": rows,
              "recipe": recipe.name, "gemv_components": comps, "gemv_best_isolated": VARIANTS[best],
              "gemv_route": {k: ("by shape" if v == 0 else VARIANTS[v]) for k, v in gemv_route.items()}, "profiles": profiles,
              "leave_one_out": leave_out, "attention_variant": attn_variant, "attention_variant_logit_rel_err": attn_check,
              "pdl": bool(nat.pdl_supported()),
              "gemv_x_layout_down": "lanes" if nat.qgemv_x_layout(5120, 17408, 4, 64, 1) == 1 else "perm8",
              "method": "T=1 decode step as a CUDA graph, replayed; median of 5 batches; random weights/KV; kernels "
                        "launched with programmatic dependent launch where the GPU supports it (sm_90+), the rows' "
                        "*_without_pdl fields time the same step launched plainly (what sm_86/89 cards run)"}
    write_result(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
