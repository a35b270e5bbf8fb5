"""Sampling: parameters, the reference sampler (torch, CPU or GPU) and stop detection.

``SamplingParams`` and ``StopChecker`` need no torch (the GUI builds and validates parameters);
``Sampler`` imports torch when it is constructed.

The order of operations, stated once (transformers' ``generate`` order for the warpers):

  1. drop ids >= valid_vocab_size (embedding padding rows: 248077..248319 for the real model)
  2. penalties, vLLM's definitions: repetition (over prompt and output ids: a positive logit is
     divided by the penalty, a negative one multiplied), then frequency (minus penalty x count of
     the id in the output), then presence (minus penalty once if the id occurs in the output)
  3. temperature 0 (below 1e-5) -> greedy: argmax, lowest id on ties. Otherwise logits / T
  4. top-k: the k largest logits (ties at the boundary go to the lower id); 0 = off, and any k
     up to the vocabulary size is honoured (no cap)
  5. top-p: the smallest prefix of the candidates, by decreasing probability, whose probability
     sums to at least top_p (always at least one token)
  6. min-p: drop candidates whose probability is below min_p x the largest probability
  7. sample from the renormalised candidates with the Gumbel-max trick and a counter-based RNG

The RNG, so that a replay (or the native engine) draws the same token from the same logits:
  uniform(seed, step, token_id) = (w + 0.5) / 2^32, where w is word 0 of
  Philox4x32-10 (Salmon et al., SC'11; the generator cuRAND and Random123 ship) with
  key = (seed mod 2^32, seed >> 32) and counter = (token_id, step mod 2^32, step >> 32, purpose).
  purpose is 0 for token sampling (other values are reserved, e.g. speculative acceptance).
  The token is argmax over candidates of (logit / T + g), g = -log(-log(uniform)), computed in
  float64 here. step defaults to the number of tokens generated so far, so the draw depends only on
  (seed, output position, logits): no hidden state, replayable after a crash or a speculative
  rollback. A native engine computing in float32 draws the same token except when two candidates'
  scores agree to within rounding.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

GREEDY_TEMPERATURE = 1e-5  # temperatures below this sample greedily (as vLLM does)
PURPOSE_SAMPLE = 0
# Speculative sampling's own draws (engine/speculative.py), keyed like a sample so that a seed replays them too:
PURPOSE_DRAFT = 1      # the draft token drawn from the MTP head's distribution
PURPOSE_ACCEPT = 2     # the uniform that accepts a draft with probability min(1, p / q)
PURPOSE_RESIDUAL = 3   # the token drawn from the residual max(0, p - q) after a rejection


class SamplingParamsError(ValueError):
    """A sampling parameter outside its valid range; the message names it and the range."""


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off; no upper cap
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # 1 = off
    seed: int | None = None  # None: the Sampler picks one and reports it
    max_tokens: int | None = 32768  # Qwen's suggested output budget; None: until end of turn or context limit
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        # Accept what JSON / OpenAI requests give: a single stop string, lists instead of tuples.
        if isinstance(self.stop, str):
            self.stop = (self.stop,)
        self.stop = tuple(self.stop)
        self.stop_token_ids = tuple(self.stop_token_ids)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    def validate(self) -> "SamplingParams":
        """Raises SamplingParamsError naming the first bad field; returns self for chaining."""
        _check_number("temperature", self.temperature, low=0.0, high=100.0)
        if not _is_int(self.top_k) or self.top_k < 0:
            raise SamplingParamsError(f"top_k must be an integer >= 0 (0 turns it off), got {self.top_k!r}")
        _check_number("top_p", self.top_p, low=0.0, high=1.0, low_open=True)
        _check_number("min_p", self.min_p, low=0.0, high=1.0)
        _check_number("presence_penalty", self.presence_penalty, low=-2.0, high=2.0)
        _check_number("frequency_penalty", self.frequency_penalty, low=-2.0, high=2.0)
        _check_number("repetition_penalty", self.repetition_penalty, low=0.0, high=10.0, low_open=True)
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**64):
            raise SamplingParamsError(f"seed must be an integer in [0, 2^64) or None, got {self.seed!r}")
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or self.max_tokens < 1):
            raise SamplingParamsError(f"max_tokens must be an integer >= 1 or None, got {self.max_tokens!r}")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise SamplingParamsError(f"stop strings must be non-empty strings, got {s!r}")
        for token_id in self.stop_token_ids:
            if not _is_int(token_id) or token_id < 0:
                raise SamplingParamsError(f"stop_token_ids must be token ids >= 0, got {token_id!r}")
        if not isinstance(self.ignore_eos, bool):
            raise SamplingParamsError(f"ignore_eos must be true or false, got {self.ignore_eos!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop"] = list(self.stop)
        data["stop_token_ids"] = list(self.stop_token_ids)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SamplingParams":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SamplingParamsError(f"unknown sampling parameter(s) {unknown}; known: {sorted(known)}")
        return cls(**data).validate()

    def with_(self, **changes: Any) -> "SamplingParams":
        return replace(self, **changes).validate()


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check_number(name: str, value: Any, *, low: float, high: float, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise SamplingParamsError(f"{name} must be a number in {bracket}{low:g}, {high:g}], got {value!r}")


# Qwen's recommended settings for Qwen3.5 / 3.6 (model card), plus plain greedy decoding.
PRESETS: dict[str, SamplingParams] = {
    "thinking": SamplingParams(temperature=1.0, top_p=0.95, top_k=20, min_p=0.0, presence_penalty=1.5),
    "thinking-coding": SamplingParams(temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, presence_penalty=0.0),
    "instruct": SamplingParams(temperature=0.7, top_p=0.8, top_k=20, min_p=0.0, presence_penalty=1.5),
    "instruct-reasoning": SamplingParams(temperature=1.0, top_p=1.0, top_k=40, min_p=0.0, presence_penalty=2.0),
    "greedy": SamplingParams(temperature=0.0),
}


def preset(name: str, **overrides: Any) -> SamplingParams:
    """A copy of a named preset, with ``overrides`` applied and validated."""
    if name not in PRESETS:
        raise SamplingParamsError(f"unknown sampling preset {name!r}; choose one of {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides).validate()


def default_params(enable_thinking: bool) -> SamplingParams:
    return preset("thinking" if enable_thinking else "instruct")


# ---- counter-based RNG --------------------------------------------------------------------------
_PHILOX_M0 = np.uint64(0xD2511F53)
_PHILOX_M1 = np.uint64(0xCD9E8D57)
_PHILOX_W0 = 0x9E3779B9
_PHILOX_W1 = 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32 with 10 rounds: ``counter`` [..., 4] uint32 words -> [..., 4] uint32 words.

    Vectorised over leading dimensions; arithmetic in uint64 so the 32x32 -> 64-bit products are
    exact. Checked against Random123's known-answer vectors in tests/test_sampling.py.
    """
    c = np.asarray(counter, dtype=np.uint64)
    c0, c1, c2, c3 = (c[..., i].copy() for i in range(4))
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    for _ in range(10):
        p0 = _PHILOX_M0 * c0
        p1 = _PHILOX_M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0 = (k0 + _PHILOX_W0) & 0xFFFFFFFF
        k1 = (k1 + _PHILOX_W1) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def uniforms(seed: int, steps: np.ndarray | Sequence[int] | int, token_ids: np.ndarray | Sequence[int],
             purpose: int = PURPOSE_SAMPLE) -> np.ndarray:
    """uniform(seed, step, token_id) in (0, 1), float64, shape [len(steps), len(token_ids)]."""
    steps_arr = np.atleast_1d(np.asarray(steps, dtype=np.uint64))
    ids = np.asarray(token_ids, dtype=np.uint64)
    counter = np.empty((steps_arr.size, ids.size, 4), dtype=np.uint64)
    counter[..., 0] = ids[None, :]
    counter[..., 1] = (steps_arr & _MASK32)[:, None]
    counter[..., 2] = (steps_arr >> np.uint64(32))[:, None]
    counter[..., 3] = purpose
    words = philox4x32_10(counter, (seed & 0xFFFFFFFF, seed >> 32))[..., 0]
    return (words.astype(np.float64) + 0.5) * 2.0**-32


# The largest noise a 32-bit uniform can give, -log(-log((2^32 - 0.5) / 2^32)), plus a margin.
GUMBEL_MAX = float(-np.log(-np.log((2.0**32 - 0.5) * 2.0**-32))) + 1e-6


def gumbel_noise(seed: int, steps: np.ndarray | Sequence[int] | int, token_ids: np.ndarray | Sequence[int],
                 purpose: int = PURPOSE_SAMPLE) -> np.ndarray:
    return -np.log(-np.log(uniforms(seed, steps, token_ids, purpose)))


# ---- the sampler --------------------------------------------------------------------------------
@dataclass
class Candidates:
    """Token ids still in play and their logits after temperature.

    Sorted by decreasing logit (ties: lower id first) when top-k or top-p ran, else in id order.
    """

    ids: "torch.Tensor"  # int64 [C]
    logits: "torch.Tensor"  # float32 [C]

    def probabilities(self) -> "torch.Tensor":
        import torch

        return torch.softmax(self.logits.double(), dim=0)


class Sampler:
    """Draws one token per call from a logit vector, per SamplingParams (order in the module doc)."""

    def __init__(self, params: SamplingParams, valid_vocab_size: int) -> None:
        import torch  # noqa: F401  (fail here, not mid-generation, if torch is missing)

        self.params = params.validate()
        if not _is_int(valid_vocab_size) or valid_vocab_size < 1:
            raise ValueError(f"valid_vocab_size must be a positive integer, got {valid_vocab_size!r}")
        self.valid_vocab_size = int(valid_vocab_size)
        # A request without a seed still gets one, reported so the user can replay the answer.
        self.seed: int = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little")

    # -- steps 1-2 ------------------------------------------------------------------------------
    def penalised_logits(self, logits: "torch.Tensor", generated_ids: Sequence[int],
                         prompt_ids: Sequence[int] = ()) -> "torch.Tensor":
        """float32 [valid_vocab_size]: the valid ids' logits with the penalties applied (a new tensor)."""
        return self._penalised(logits, generated_ids, prompt_ids)[0]

    def _penalised(self, logits: "torch.Tensor", generated_ids: Sequence[int],
                   prompt_ids: Sequence[int]) -> tuple["torch.Tensor", bool]:
        """Steps 1-2, plus whether every valid logit is finite (-inf ones are simply never drawn)."""
        import torch

        if logits.dim() != 1:
            raise ValueError(f"logits must be one vector [V], got shape {tuple(logits.shape)}")
        if logits.shape[0] < self.valid_vocab_size:
            raise ValueError(f"logits have {logits.shape[0]} entries but the vocabulary has {self.valid_vocab_size}")
        # Slicing drops the padding ids (step 1); the copy keeps the caller's tensor intact.
        x = logits.detach()[: self.valid_vocab_size].to(torch.float32, copy=True)
        # One reduction answers "all finite?" in the usual case; the detailed checks run only if not.
        # Penalties cannot make a finite logit infinite, so the answer holds after them too.
        all_finite = bool(torch.isfinite(x.sum()))
        if not all_finite and (bool(torch.isnan(x).any()) or bool(torch.isposinf(x).any())):
            raise ValueError("logits contain NaN or +inf: the model output is broken, nothing can be sampled")
        p = self.params
        if p.repetition_penalty != 1.0:
            seen = self._ids_tensor(list(prompt_ids) + list(generated_ids), x.device).unique()
            if seen.numel():
                values = x[seen]
                x[seen] = torch.where(values > 0, values / p.repetition_penalty, values * p.repetition_penalty)
        if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0:
            ids, counts = self._ids_tensor(generated_ids, x.device).unique(return_counts=True)
            if ids.numel():
                x[ids] -= p.frequency_penalty * counts.to(torch.float32) + p.presence_penalty
        return x, all_finite

    def _ids_tensor(self, ids: Sequence[int], device: Any) -> "torch.Tensor":
        import torch

        t = torch.as_tensor(list(ids), dtype=torch.int64, device=device)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.valid_vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.valid_vocab_size - 1}, got {t.min()}..{t.max()}")
        return t

    # -- steps 3-6 ------------------------------------------------------------------------------
    def candidates(self, logits: "torch.Tensor", generated_ids: Sequence[int],
                   prompt_ids: Sequence[int] = ()) -> Candidates:
        """What a sampling step draws from (not used when greedy)."""
        import torch

        p = self.params
        x, all_finite = self._penalised(logits, generated_ids, prompt_ids)
        if p.greedy:  # one candidate: the argmax
            best = x.argmax().reshape(1)
            return Candidates(best, x[best])
        finite_count = x.numel() if all_finite else int(torch.isfinite(x).sum())
        if finite_count == 0:
            raise ValueError("every logit is -inf after masking and penalties: nothing can be sampled")
        if 0 < p.top_k < finite_count:
            # Dividing by T > 0 keeps the order, so top-k runs first and T touches only k logits.
            ids = _top_k_ids(x, p.top_k)
            values = x[ids] / p.temperature
        else:
            ids = torch.arange(x.numel(), device=x.device) if all_finite else torch.isfinite(x).nonzero().squeeze(1)
            values = (x / p.temperature) if all_finite else x[ids] / p.temperature
            if p.top_p >= 1.0:
                # Nothing below needs an order: skip the 248K-entry sort, keep id order.
                return self._min_p(Candidates(ids, values))
        # Sort by decreasing logit; ids are increasing here, so a stable sort breaks ties to the lower id.
        order = torch.sort(values, descending=True, stable=True).indices
        cand = Candidates(ids[order], values[order])

        if p.top_p < 1.0:
            probs = cand.probabilities()
            mass_before = torch.cumsum(probs, 0) - probs
            keep = int((mass_before < p.top_p).sum())
            cand = Candidates(cand.ids[: max(keep, 1)], cand.logits[: max(keep, 1)])
        return self._min_p(cand)

    def _min_p(self, cand: Candidates) -> Candidates:
        if self.params.min_p <= 0.0:
            return cand
        # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p): no softmax needed.
        keep = cand.logits >= cand.logits.max() + math.log(self.params.min_p)
        return Candidates(cand.ids[keep], cand.logits[keep])

    # -- step 7 ---------------------------------------------------------------------------------
    def sample(self, logits: "torch.Tensor", generated_ids: Sequence[int], *,
               prompt_ids: Sequence[int] = (), step: int | None = None) -> int:
        """The next token id. ``generated_ids``: this response's tokens so far (penalties and the
        default step); ``prompt_ids``: the prompt, used only by the repetition penalty."""
        if self.params.greedy:
            return int(self._penalised(logits, generated_ids, prompt_ids)[0].argmax())
        step = len(generated_ids) if step is None else step
        return self.sample_steps(logits, generated_ids, [step], prompt_ids=prompt_ids)[0]

    def sample_steps(self, logits: "torch.Tensor", generated_ids: Sequence[int], steps: Iterable[int], *,
                     prompt_ids: Sequence[int] = ()) -> list[int]:
        """What ``sample`` returns at each of ``steps`` for these same logits and history.

        For replay and for measuring the sampling distribution: one call draws many steps.
        """
        steps = [int(s) for s in steps]
        if any(s < 0 or s >= 2**64 for s in steps):
            raise ValueError("steps must lie in [0, 2^64)")
        if self.params.greedy:
            return [self.sample(logits, generated_ids, prompt_ids=prompt_ids)] * len(steps)
        cand = self.candidates(logits, generated_ids, prompt_ids)
        ids = cand.ids.cpu().numpy()
        values = cand.logits.cpu().double().numpy()
        step_arr = np.asarray(steps, dtype=np.uint64)
        # Exact pruning, so a full-vocabulary draw does not need 248K Philox calls: no noise exceeds
        # GUMBEL_MAX, so a token whose logit is below (the best token's score) - GUMBEL_MAX can
        # never win. The winner is the same as scoring every candidate.
        best = int(values.argmax())
        best_scores = values[best] + gumbel_noise(self.seed, step_arr, ids[best : best + 1])[:, 0]
        contenders = values >= best_scores.min() - GUMBEL_MAX
        ids, values = ids[contenders], values[contenders]
        scores = values[None, :] + gumbel_noise(self.seed, step_arr, ids)
        return [int(i) for i in ids[scores.argmax(axis=1)]]


def _top_k_ids(x: "torch.Tensor", k: int) -> "torch.Tensor":
    """Ids (increasing) of the k largest values of x; among values equal to the k-th, the lowest ids win."""
    import torch

    values, ids = torch.topk(x, k)
    kth = values[-1]
    if int((x == kth).sum()) == int((values == kth).sum()):
        return ids.sort().values  # no tie crosses the boundary: topk's choice is the only one
    above = (x > kth).nonzero().squeeze(1)
    tied = (x == kth).nonzero().squeeze(1)[: k - above.numel()]
    return torch.cat([above, tied]).sort().values


# ---- stopping -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StopDecision:
    """What to show after one token, and whether generation ends here.

    finish_reason is None while generating, "stop" (end of turn, stop token or stop string) or
    "length" (max_tokens reached), as in the OpenAI protocol; ``matched`` says which stop fired.
    """

    text: str
    stop: bool
    finish_reason: str | None = None
    matched: str | int | None = None


@dataclass
class StopChecker:
    """Finds stop strings across token boundaries, stop/eos ids and the token limit.

    Text that could be the start of a stop string is held back until it is clearly not one, so
    the user never sees a partial stop string; the stop string itself is never shown. The text of
    a stop token or eos token is not shown either.
    """

    params: SamplingParams
    eos_ids: Sequence[int] = ()
    _held: str = field(default="", init=False)
    _count: int = field(default=0, init=False)
    _done: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._stop_ids = set(self.params.stop_token_ids)
        self._eos_ids = set() if self.params.ignore_eos else set(self.eos_ids)
        self._longest_stop = max((len(s) for s in self.params.stop), default=0)

    @property
    def tokens_seen(self) -> int:
        return self._count

    def push(self, token_id: int, text: str) -> StopDecision:
        """``text``: what the stream decoder returned for this token (may be "")."""
        if self._done:
            raise RuntimeError("StopChecker.push() after a stop; make a new checker per response")
        self._count += 1
        if token_id in self._stop_ids or token_id in self._eos_ids:
            return self._finish(self.flush(), "stop", token_id)
        buffer = self._held + text
        found = _first_stop(buffer, self.params.stop)
        if found is not None:
            index, stop = found
            self._held = ""
            return self._finish(buffer[:index], "stop", stop)
        keep = _partial_stop_length(buffer, self.params.stop, self._longest_stop)
        self._held = buffer[len(buffer) - keep:] if keep else ""
        emit = buffer[: len(buffer) - keep]
        if self.params.max_tokens is not None and self._count >= self.params.max_tokens:
            return self._finish(emit + self.flush(), "length", None)
        return StopDecision(emit, False)

    def flush(self) -> str:
        """Releases held-back text (when generation ends for another reason, e.g. the context limit)."""
        held, self._held = self._held, ""
        return held

    def _finish(self, text: str, reason: str, matched: str | int | None) -> StopDecision:
        self._done = True
        return StopDecision(text, True, reason, matched)


def _first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for stop in stops:
        index = text.find(stop)
        if index >= 0 and (best is None or index < best[0]):
            best = (index, stop)
    return best


def _partial_stop_length(text: str, stops: Sequence[str], longest: int) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
    for length in range(min(longest - 1, len(text)), 0, -1):
        suffix = text[-length:]
        if any(stop.startswith(suffix) for stop in stops):
            return length
    return 0
