"""Causality and determinism of the engine's T > 1 steps with the tensor-core GEMV of T = 2..16 (GPU diagnostic,
sessions 39-40). On a tiny checkpoint, a step of two tokens [a, b] and one of [a, c] from the same state must give the
same row-0 logits (causality), and one step run twice must give the same logits (determinism). Each is checked with
the tensor-core GEMV on and off, with programmatic dependent launch (set_pdl) on and off, and with and without CUDA
graphs, then with the engine's leave-one-out masks at T = 2 and 16: the switch that makes a fault go away names its
cause. Session 40 (bench/results/mma-probe-h100-s40-call1.txt): exact with PDL off, wrong with it on, which led to
the GEMV's x loads scheduled above its PDL wait (bench/pdl_load_order.py).
    python bench/mma_engine_probe.py
"""
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> int:
    from tiny_models import TinyShape, make_tiny_hf_model

    from engine.native import load_native
    from engine.native_backend import NativeModel
    from test_native_model import source_from_checkpoint
    nat = load_native()
    shape = TinyShape(hidden_size=256, intermediate_size=512, linear_head_dim=128)
    _, path = make_tiny_hf_model(Path(tempfile.mkdtemp()), seed=6, vision=False, mtp=False, text_only_layout=True,
                                 vocab_size=1024, num_hidden_layers=8, shape=shape)
    m = NativeModel.from_checkpoint(source_from_checkpoint(path), kv_dtype="bf16", max_context=256,
                                    vram_budget_bytes=2 << 30, prefill_chunk=0)
    prompt = torch.randint(0, 1000, (12,), generator=torch.Generator().manual_seed(3)).tolist()

    def step(tokens):
        s = m.new_state(64)
        m.forward(torch.tensor(prompt[:6]), s)          # T = 6 steps of the prompt, then the probe step
        m.forward(torch.tensor(prompt[6:]), s)
        out = m.forward(torch.tensor(tokens), s).logits.double()
        m.release(s)
        return out

    for mma in (0, 1):
        for pdl in (1, 0):
            for graphs in (1, 0):
                nat.set_qgemv_mma(bool(mma))
                nat.set_pdl(bool(pdl))
                m.engine.set_use_graphs(bool(graphs))
                m.engine.reset_graphs()
                ab, ac, ab2 = step([5, 7]), step([5, 9]), step([5, 7])
                one = step([5])
                causal = float((ab[0] - ac[0]).abs().max())
                determ = float((ab - ab2).abs().max())
                vs_one = float((ab[0] - one[0]).abs().max())
                print(f"mma {mma} pdl {pdl} graphs {graphs}: row 0 [a,b] vs [a,c] {causal:.2e}, run twice {determ:.2e}, "
                      f"row 0 vs a one-token step {vs_one:.2e}, nan {bool(ab.isnan().any())}", flush=True)
    # Which part of the step breaks causality: the engine's leave-one-out mask (set_skip_mask; 2 the conv, 4 the
    # recurrence, 8 attention, 16 the MLP GEMVs, 32 the mixer GEMVs) with the tensor-core GEMV on, at T = 2 and 16.
    nat.set_pdl(True)
    m.engine.set_use_graphs(True)
    long_a = list(range(3, 19))
    long_b = long_a[:-1] + [77]
    for skip in (0, 2, 4, 8, 16, 32, 2 | 4, 8 | 16, 2 | 4 | 8 | 32):
        m.engine.set_skip_mask(skip)
        for mma in (0, 1):
            nat.set_qgemv_mma(bool(mma))
            m.engine.reset_graphs()
            ab, ac = step([5, 7]), step([5, 9])
            la, lb = step(long_a), step(long_b)
            print(f"skip {skip:2d} mma {mma}: T=2 row 0 {float((ab[0] - ac[0]).abs().max()):.2e}; T=16 rows 0..14 "
                  f"{float((la[:15] - lb[:15]).abs().max()):.2e}; nan {bool(la.isnan().any() or ab.isnan().any())}",
                  flush=True)
    m.engine.set_skip_mask(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
