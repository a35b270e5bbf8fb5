"""Why the tensor-core GEMV of T = 2..16 is wrong inside the engine while its op tests pass (GPU diagnostic,
session 39). On a tiny checkpoint, a step of two tokens [a, b] and one of [a, c] from the same state must give the
same row-0 logits (causality), and one step run twice must give the same logits (determinism). Each is checked with
the tensor-core GEMV on and off, with programmatic dependent launch (set_pdl) on and off, and with and without CUDA
graphs: the switch that makes the fault go away names its cause.
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
