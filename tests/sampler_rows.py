"""Rows of logits and sampling cases for the device sampler's narrowing paths, shared by
tests/test_native_sampler.py (the GPU oracle tests) and bench/narrowing_emulation.py (the numpy copy of the method),
so that the emulation reasons about the shapes the tests run. No GPU needed."""

from __future__ import annotations

V = 248320  # the 27B's logits row

SLICE_DRAW_CASES = {
    "temperature-only": dict(temperature=0.8),
    "temperature-only-penalties": dict(temperature=1.0, presence_penalty=1.5, repetition_penalty=1.1,
                                       frequency_penalty=0.2),
    "min-p-only": dict(temperature=1.0, min_p=0.1),
    "min-p-tiny": dict(temperature=1.3, min_p=1e-13),  # log(min_p) = -29.9: below the draw's reach, the cutoff binds
    # top-p: the sorted candidates as before, but only those at or above min-p's floor collected
    "top-p-min-p": dict(temperature=1.0, top_p=0.95, min_p=0.05),
    "top-p-min-p-tight": dict(temperature=0.7, top_p=0.5, min_p=0.2, presence_penalty=1.0),
    # top-p alone: where too many ids lie within reach, narrowed to the bins where the cut may fall
    "top-p-only": dict(temperature=1.0, top_p=0.9),
    "top-p-tight-penalties": dict(temperature=0.8, top_p=0.5, presence_penalty=1.0, repetition_penalty=1.1),
    "top-p-loose": dict(temperature=1.2, top_p=0.995),
    "top-p-min-p-loose": dict(temperature=1.0, top_p=0.9, min_p=1e-4),
}


def sampler_rows(gen, hot: list[int], T: int) -> dict:
    """Row shapes from a trained model's (a few leaders far above a long tail) to flat ones, at float32 extremes:
    name -> [T, V] float32 (the flat rows repeat one row). hot: ids lifted above the rest (the history's, so that
    penalties matter)."""
    import torch

    peaked = torch.randn(T, V, generator=gen) * 2.5
    peaked[:, hot] += 9.0
    tail = torch.randn(T, V, generator=gen) * 12
    tail[:, hot] = 60.0 + torch.randn(T, len(hot), generator=gen) * 0.5
    # most ids within reach of the draw (a trained model's row at temperature 1 may look like this): without the slice
    # draw, the one-block fallback takes it
    broad = torch.randn(T, V, generator=gen) * 3.0
    broad[:, hot] += 12.0
    # the ids near top-p's cut all in one slice, more of them than its candidate region holds (a vocabulary keeps
    # related tokens at neighbouring ids): narrowed into one packed list
    clustered = torch.full((T, V), -30.0)
    clustered[:, 6144:8192] = 10.0 + torch.randn(T, 2048, generator=gen) * 0.02
    clustered[:, hot] = 12.0
    rows = {"peaked": peaked, "long tail": tail, "broad": broad,
            "integers": torch.round(torch.randn(T, V, generator=gen) * 2.0), "clustered": clustered}
    for offset in (3.0e4, -1.0e5):
        rows[f"flat at {offset:g}"] = (torch.randn(1, V, generator=gen) * 0.7 + offset).expand(T, V).contiguous()
    return rows
