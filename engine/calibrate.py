"""Activation statistics for activation-aware quantization, with bounded memory.

The scale search (engine.quant.quantize_search) can weight each input column's squared error by
an importance, the mean square of that column's input activation: the error that matters is
||X W^T - X Ŵ^T||, and columns fed by large activations matter more. This module measures those
importances by running a short built-in calibration text through the reference decoder, one
layer in memory at a time: each layer is read from the source, run on the calibration tokens,
and dropped, so a 27B needs about one layer (2 GB in fp32) plus the activations. Every
``F.linear`` call is observed through a TorchFunctionMode and attributed to the checkpoint key of
its weight.

Embeddings get no importance (a row gather has no input); the MTP head and the vision tower are
not run (their weights use the plain search).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from engine.config import ModelConfig
from engine.reference.model import ReferenceModel
from engine.reference.weights import TextWeights, _layer, _Reader

# Mixed prose, code, arithmetic and chat markup: the kinds of text the model serves.
CALIBRATION_TEXT = """<|im_start|>system
You are a careful assistant. Answer briefly and show your reasoning when it helps.<|im_end|>
<|im_start|>user
Why does a train's wheel have a flange on the inside, and what keeps it centred on a curve?<|im_end|>
<|im_start|>assistant
The wheels are conical: on a curve the outer wheel rides on a larger radius than the inner one,
so the axle steers itself back towards the centre. The flange is only a last line of defence.
<|im_end|>
<|im_start|>user
Write a Python function that merges two sorted lists in linear time.<|im_end|>
<|im_start|>assistant
def merge(a: list[int], b: list[int]) -> list[int]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i]); i += 1
        else:
            out.append(b[j]); j += 1
    return out + a[i:] + b[j:]
<|im_end|>
<|im_start|>user
Compute 17 * 23 + 4^3 and explain each step. Then translate "the night train leaves at nine" into
French and German.<|im_end|>
<|im_start|>assistant
17 * 23 = 391, 4^3 = 64, and 391 + 64 = 455. French: « le train de nuit part à neuf heures ».
German: „Der Nachtzug fährt um neun Uhr ab."<|im_end|>
"""


@dataclass
class ActivationStats:
    """Mean square of the input of every observed linear layer, per input column."""

    mean_square: dict[str, torch.Tensor]  # checkpoint key of the weight -> fp32 [K]
    tokens: int

    def importance(self, key: str, floor: float = 0.05) -> torch.Tensor | None:
        """Column weights for quantize_search: mean-square normalised to mean 1, floored so that
        no column is ignored entirely (the calibration text is short)."""
        ms = self.mean_square.get(key)
        if ms is None:
            return None
        mean = float(ms.mean())
        if mean <= 0.0:
            return None
        return ms / mean + floor


class _LinearObserver(TorchFunctionMode):
    """Accumulates sum(x^2) per input column for F.linear calls whose weight is registered."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[int, str] = {}          # id of a weight tensor -> checkpoint key
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None):
        kwargs = kwargs or {}
        if func is F.linear and len(args) >= 2:
            key = self.keys.get(id(args[1]))
            if key is not None:
                x = args[0].detach().float().reshape(-1, args[0].shape[-1])
                s = (x * x).sum(0)
                self.sums[key] = self.sums[key] + s if key in self.sums else s
                self.counts[key] = self.counts.get(key, 0) + x.shape[0]
        return func(*args, **kwargs)


class _StreamedLayers(Sequence):
    """The decoder layers, each read from the source when the forward reaches it and then dropped."""

    def __init__(self, reader: _Reader, config: ModelConfig, full_key: Callable[[str], str],
                 observer: _LinearObserver, on_layer: Callable[[int, int], None] | None = None):
        self.reader, self.config, self.full_key, self.observer = reader, config, full_key, observer
        self.on_layer = on_layer

    def __len__(self) -> int:
        return self.config.text.num_hidden_layers

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            raise TypeError("streamed layers are read one at a time")
        if not 0 <= i < len(self):
            raise IndexError(i)
        if self.on_layer is not None:
            self.on_layer(i, len(self))
        lw = _layer(self.reader, f"layers.{i}.", self.config.text.is_full_attention(i))
        self.observer.keys.clear()  # ids of the previous layer's tensors may be reused
        for part in (lw, lw.attention, lw.gdn):
            if part is None:
                continue
            for name, t in vars(part).items():
                is_matrix = isinstance(t, torch.Tensor) and t.dim() == 2
                if is_matrix and (name.endswith("_proj") or name.startswith("in_proj")):
                    self.observer.keys[id(t)] = self.full_key(_rel_key(i, part, name))
        return lw


def _rel_key(i: int, part: Any, name: str) -> str:
    kind = type(part).__name__
    if kind == "AttentionWeights":
        return f"layers.{i}.self_attn.{name}.weight"
    if kind == "GDNWeights":
        return f"layers.{i}.linear_attn.{name}.weight"
    return f"layers.{i}.mlp.{name}.weight"


def calibration_ids(config: ModelConfig, max_tokens: int = 192) -> torch.Tensor:
    """The calibration text as token ids (ids folded into a test model's smaller vocabulary)."""
    from engine.tokenizer import load_tokenizer

    ids = torch.tensor(load_tokenizer().encode(CALIBRATION_TEXT)[:max_tokens], dtype=torch.long)
    vocab = config.text.vocab_size
    return ids % vocab if int(ids.max()) >= vocab else ids


@torch.no_grad()
def collect_activation_stats(source, config: ModelConfig, *, tokens: torch.Tensor | None = None,
                             dtype: torch.dtype = torch.float32,
                             on_layer: Callable[[int, int], None] | None = None) -> ActivationStats:
    """Run the calibration tokens through the trunk of ``source`` (a Checkpoint-like reader with
    ``.text(rel_key)`` and ``.full_key(rel_key)``) one layer at a time and return the statistics.
    ``on_layer(i, n)`` is called before layer i of n is read."""
    ids = calibration_ids(config) if tokens is None else tokens.reshape(-1)
    observer = _LinearObserver()
    reader = _Reader(source, "cpu", dtype)
    embed = source.text("embed_tokens.weight")
    x = embed[ids].to(dtype)  # gather the few rows needed; the table itself is never converted
    del embed
    h = config.text.hidden_size
    weights = TextWeights(embed_tokens=torch.zeros(1, h, dtype=dtype),
                          layers=_StreamedLayers(reader, config, source.full_key, observer, on_layer),  # type: ignore[arg-type]
                          norm=reader.f32("norm.weight"), lm_head=torch.zeros(1, h, dtype=dtype), mtp=None)
    model = ReferenceModel(config, weights, device="cpu", dtype=dtype)
    state = model.new_state(len(ids))
    with observer:
        out = model.forward(None, state, inputs_embeds=x, last_only=True)
    final = out.hidden.float()
    means = {k: s / observer.counts[k] for k, s in observer.sums.items()}
    means[source.full_key("lm_head.weight")] = (final * final).mean(0)
    return ActivationStats(means, len(ids))
