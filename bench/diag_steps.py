"""Diagnostic: multi-token decode steps (T = 2..16) at kv_start > 0 against single-token steps.

Session 2 found that a 100-token prompt fed through the decode step in steps of 16 disagrees with
both the prefill path and the reference (rel err 0.36) while single-token steps agree. This script
localises it on the tiny test checkpoint: step widths, graphs on/off, KV dtype.

    python bench/diag_steps.py
"""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, "tests")


def main() -> None:
    from native_helpers import rel_err
    from test_native_model import source_from_checkpoint
    from tiny_models import TinyShape, make_tiny_hf_model
    from engine.native_backend import NativeModel
    import tempfile
    d = tempfile.mkdtemp()
    shape = TinyShape(hidden_size=256, intermediate_size=512, linear_head_dim=128)
    _, path = make_tiny_hf_model(d, seed=5, vision=False, mtp=False, text_only_layout=True, vocab_size=1024,
                                 num_hidden_layers=8, shape=shape)
    src = source_from_checkpoint(path)
    prompt = torch.randint(0, 1000, (100,), generator=torch.Generator().manual_seed(11))
    for kv in ("bf16",):
        m = NativeModel.from_checkpoint(src, kv_dtype=kv, max_context=512, vram_budget_bytes=2 << 30,
                                        prefill_chunk=0)

        def run(width: int, graphs: bool, n: int = 100):
            m.engine.set_use_graphs(graphs)
            m.engine.reset_graphs()
            s = m.new_state(256)
            out = None
            for i in range(0, n, width):
                out = m.forward(prompt[i:min(i + width, n)], s).logits[-1]
            m.release(s)
            return out

        base = run(1, True)
        for n in (16, 32, 48, 100):
            b1 = run(1, True, n)
            for width in (2, 4, 8, 15, 16):
                print(f"{kv} n={n} width={width:2d}: graphs {rel_err(run(width, True, n), b1):.1e}, "
                      f"no graphs {rel_err(run(width, False, n), b1):.1e}", flush=True)
        m.engine.set_use_graphs(True)
        del base


if __name__ == "__main__":
    main()
