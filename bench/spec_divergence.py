"""Where the native greedy speculative tokens leave the one-token greedy tokens (GPU diagnostic, session 39).

A tiny random checkpoint with an MTP head; plain greedy by one-token steps (each row's logits kept), then speculative
rounds with always-right oracle drafts (k = 1): at each round the verify step's logits rows are compared with the
one-token logits at the same positions, and the first disagreement of tokens is printed with the top-2 margin there.
    python bench/spec_divergence.py [--mma 0|1]
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mma", type=int, default=0)
    ap.add_argument("--k", type=int, default=1)
    args = ap.parse_args()
    from tiny_models import TinyShape, make_tiny_hf_model

    from engine.native import load_native
    from engine.native_backend import NativeModel
    from test_native_model import source_from_checkpoint
    nat = load_native()
    nat.set_qgemv_mma(bool(args.mma))
    shape = TinyShape(hidden_size=256, intermediate_size=512, linear_head_dim=128)
    _, path = make_tiny_hf_model(Path(tempfile.mkdtemp()), seed=6, vision=False, mtp=True, text_only_layout=True,
                                 vocab_size=1024, num_hidden_layers=8, shape=shape)
    m = NativeModel.from_checkpoint(source_from_checkpoint(path, mtp=True), kv_dtype="bf16", max_context=512,
                                    vram_budget_bytes=2 << 30, mtp_drafts=3)
    V = 1000
    prompt = torch.randint(0, V, (25,), generator=torch.Generator().manual_seed(11)).tolist()
    n = 40
    s = m.new_state(200)
    lg = m.forward(torch.tensor(prompt), s, last_only=True).logits[-1]
    want, rows = [], []
    for _ in range(n + 4):
        rows.append(lg[:V].double())
        want.append(int(lg[:V].argmax()))
        lg = m.forward(torch.tensor([want[-1]]), s).logits[-1]
    m.release(s)
    k = args.k
    s = m.new_state(200)
    m.forward(torch.tensor(prompt), s, last_only=True)
    start = len(prompt)
    last = want[0]
    m.mtp_draft(s, last)
    for r in range(12):
        base = s.seq_len
        i = base - start
        drafts = want[i + 1:i + 1 + k]
        out = m.forward([last] + drafts, s, keep_states=True).logits[:, :V].double()
        for t in range(k + 1):
            ref = rows[i + t + 1]   # the one-token logits after want[i + t]
            top2 = torch.topk(ref, 2).values
            diff = float((out[t] - ref).abs().max())
            tok = int(out[t].argmax())
            flag = "" if tok == want[i + t + 1] else f"  <-- verify {tok} vs one-token {want[i + t + 1]}"
            print(f"round {r} pos {i + t}: max |logit diff| {diff:.2e}, top-2 margin {float(top2[0] - top2[1]):.3e}{flag}")
        targets = m.sample(s, temperature=0.0, vocab_limit=V, rows=k + 1)
        kept = 0
        while kept < k and targets[kept] == drafts[kept]:
            kept += 1
        print(f"  targets {targets} drafts {drafts} want {want[i + 1:i + k + 2]} kept {kept}")
        committed = drafts[:kept] + [targets[kept]]
        m.commit(s, kept + 1)   # leaves the kept positions' head pairs pending
        last = committed[-1]
        m.mtp_draft(s, last)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
