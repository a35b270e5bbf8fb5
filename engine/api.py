"""The one Engine API the worker, the CLI and the server use, over two backends.

``reference``: the pure-torch model (CPU or GPU), the oracle and the fallback without a GPU.
``native``: the CUDA engine (engine/native_backend.py), when built and a GPU is usable.
``auto`` loads on the first of these that can run here (choose_backend).

A request goes: messages -> chat template -> token ids (image pads expanded to the vision grid)
-> chunked prefill -> decode loop (sampler, stop checks, streaming detokenizer, channel parser)
-> TextDelta events on two channels (reasoning, content) -> one Finished event.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from engine.errors import BackendUnavailableError, EngineError, ModelLoadError, PromptError
from engine.sampling import SamplingParams

ProgressFn = Callable[[float, str], None]

DEFAULT_MTP_DRAFTS = 3   # EngineOptions.mtp_draft_tokens, `monorail chat --mtp-drafts` and the app's setting


@dataclass
class EngineOptions:
    # "reference", "native", or "auto" (native where a CUDA GPU is usable, else reference: choose_backend). The
    # library's default stays the explicit oracle; the app and `monorail chat` default to "auto".
    backend: str = "reference"
    max_context: int | None = None    # None: the model's limit
    kv_dtype: str = "int8"            # native only: "bf16" | "int8" | "int4" (engine.plan.KV_DTYPES)
    vram_budget_bytes: int | None = None
    device: str | None = None         # reference only: None picks cuda when available, else cpu
    prefill_chunk: int = 512
    mtp_speculation: bool = False     # replies draft with the MTP head (engine/speculative.py, native_speculative.py)
    # drafts a round, 1..5 (the MTP head chained on its own output past the first). 3: on random 27B weights at 80 %
    # acceptance a round of 3 decodes 1.66x plain decoding against 1.10x for 1 (bench/results/spec-decode-h100-s41-call2.json)
    mtp_draft_tokens: int = DEFAULT_MTP_DRAFTS
    # Prefix reuse: the state where a prompt's history ends (before its last "<|im_start|>") is kept, and the next
    # prompt that starts with those tokens (the same conversation's next turn, a regenerated reply) prefills only
    # what follows. Histories shorter than the minimum are simply recomputed. The newest snapshot costs little (the
    # native engine's KV stays where it is on the GPU); when another conversation takes the GPU, the snapshots of
    # those set aside are kept in host memory (their KV copied: ~34 KB a token for the 27B with int8 KV), the most
    # recently used first, within prefix_cache_bytes (0: nothing is set aside, only the current conversation's
    # snapshots are kept).
    prefix_reuse: bool = True
    prefix_reuse_min_tokens: int = 512
    prefix_cache_bytes: int = 8 << 30
    # Saved states (engine.prefix_store): a conversation of at least prefix_disk_min_tokens is also written to disk
    # when it is set aside and when the model is unloaded (the app closing, another model loading), so that it goes
    # on after a restart without being recomputed; the least recently used leave first to keep within
    # prefix_disk_bytes. Off (0) for the library; the app turns it on (Settings → Memory, 16 GiB by default).
    prefix_disk_bytes: int = 0
    prefix_disk_dir: str | None = None    # None: engine.paths.states_dir()
    prefix_disk_min_tokens: int = 2048


@dataclass
class ModelInfo:
    name: str
    path: str
    random_weights: bool
    context_limit: int
    has_vision: bool                  # images can be sent: a vision tower this backend runs
    has_mtp: bool
    backend: str
    device: str
    plan: dict | None = None
    vision_tower: bool = False        # the checkpoint has a vision tower (even where this backend cannot run it)
    backend_note: str = ""            # why this backend, when "auto" chose it


BACKENDS = ("auto", "native", "reference")
# Finished.prefill_tok_s is left out below this many prefilled tokens (a resumed turn, a short question): the time of
# so few says more about fixed costs than about a rate, and the dashboard would show it as the prefill speed.
PREFILL_RATE_MIN_TOKENS = 128
# Host memory a conversation set aside (prefix reuse) must leave free: the cache never pushes the machine into swap.
HOST_MEMORY_RESERVE = 2 << 30


def host_available_bytes() -> int | None:
    """The kernel's estimate of memory available without swapping (Linux /proc/meminfo), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_can_hold(nbytes: int) -> bool:
    """Whether ``nbytes`` more of host memory leave HOST_MEMORY_RESERVE available (True where that is unknown)."""
    available = host_available_bytes()
    return available is None or nbytes <= available - HOST_MEMORY_RESERVE


def choose_backend(requested: str) -> tuple[str, str]:
    """The backend a request for ``requested`` loads on, and why when "auto" chose it.

    "auto" is the native engine wherever it can run (a CUDA build and a usable GPU) and the reference
    elsewhere (DESIGN.md: the reference is the backend on machines without a usable GPU). The note says which
    reason decided, so a user whose GPU was passed over (a CPU-only build, an old driver) can see why."""
    if requested != "auto":
        if requested not in BACKENDS:
            raise EngineError(f"Unknown backend {requested!r}: use 'auto', 'native' or 'reference'.")
        return requested, ""
    from engine.native import native_status

    st = native_status()
    if st.gpu_usable:
        return "native", f"chosen automatically: {st.gpu_name} is usable by the native engine"
    return "reference", f"chosen automatically: the native engine cannot run here ({st.reason})"


@dataclass
class TextDelta:
    # "reasoning" | "content" | "tool_call" (the raw text of one complete, parsed tool call; the
    # parsed call itself arrives in Finished.tool_calls). Clients that know no tool calls show it as content.
    channel: str
    text: str


@dataclass
class Finished:
    reason: str  # "stop" | "length" | "cancelled" | "error"
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float | None
    prefill_tok_s: float | None
    decode_tok_s: float | None
    tool_calls: list[dict] = field(default_factory=list)
    spec_accept_rate: float | None = None
    error: str | None = None
    cached_tokens: int = 0            # prompt tokens resumed from the previous turn's snapshot, not recomputed


@dataclass(eq=False)
class _PrefixSnapshot:
    ids: list[int]                    # the prompt tokens the snapshot has consumed
    state: object                     # the backend's snapshot (model.snapshot)


GenEvent = TextDelta | Finished


@dataclass
class _Prompt:
    text: str      # the rendered template (its tail says whether output starts inside <think>)
    ids: list[int]  # image pads already expanded to one per merged vision patch
    images: list   # engine.image.ImageInput, in prompt order


@dataclass
class _ResolvedModel:
    path: Path
    checkpoint: object      # engine.loader.Checkpoint or an artifact's checkpoint view (same interface)
    random_weights: bool
    name: str
    chat_template: str      # the checkpoint's own template, else the default one


def mtp_can_draft(backend: str) -> bool:
    """Whether requests may draft with the MTP head (EngineOptions.mtp_speculation). The reference backend drafts
    for every request (greedy ones by the greedy rule, sampled ones by the speculative sampling rule,
    engine/speculative.py); so does the native one (engine/native_speculative.py: drafts and the verify step's tokens
    drawn on the GPU, a sampled draft with the noise of the trunk's draw at its place), where its verify steps are
    cheap enough to pay (engine.native.verify_steps_pay). The model must also have an MTP head and the prompt no
    images (Engine._can_speculate)."""
    if backend == "reference":
        return True
    from engine import native
    return backend == "native" and native.verify_steps_pay()


def _resolve_model(model: str) -> _ResolvedModel:
    """Open "demo", a Hugging Face checkpoint folder or a Monorail artifact file."""
    from engine import demo
    from engine.chat_template import load_chat_template

    if model == "demo":
        path = demo.ensure_demo_model()
    else:
        path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(f"No model at {path}: pick a Hugging Face checkpoint folder or a Monorail artifact.")
    if path.is_file():
        from engine.artifact import Artifact

        art = Artifact.open(path)  # ArtifactError is a ModelLoadError with a message naming the problem
        return _ResolvedModel(path, art.checkpoint_view(), False, path.stem,
                              art.chat_template() or load_chat_template(None))
    from engine.config import ConfigError
    from engine.loader import Checkpoint, CheckpointError

    try:
        ckpt = Checkpoint.open(path)
    except (ConfigError, CheckpointError) as exc:
        raise ModelLoadError(str(exc)) from exc
    random_weights = demo.is_demo_model(path)
    return _ResolvedModel(path, ckpt, random_weights, demo.DEMO_NAME if random_weights else path.name,
                          load_chat_template(path))


class Engine:
    """A loaded model plus everything needed to turn chat messages into streamed text."""

    def __init__(self, model, checkpoint, info: ModelInfo, options: EngineOptions, chat_template: str):
        from engine.tokenizer import load_tokenizer

        self._model = model
        self._ckpt = checkpoint
        self.info = info
        self.options = options
        self.config = model.config
        self.tokenizer = load_tokenizer()
        self.chat_template = chat_template
        self._lock = threading.Lock()  # one generation at a time on one model
        self._prefixes: list[_PrefixSnapshot] = []   # prefix reuse: most recently used first (_prefill)
        self._im_start = self.tokenizer.encode("<|im_start|>", allow_special=True)
        self._store = None      # engine.prefix_store.PrefixStore: saved states (open_state_store)
        self._writer = None     # one thread that writes states to the store, off the generation's path

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(cls, model: str, options: EngineOptions | None = None, progress: ProgressFn | None = None) -> "Engine":
        options = options or EngineOptions()
        report = progress or (lambda frac, msg: None)
        report(0.0, f"Opening {model}")
        resolved = _resolve_model(model)
        ckpt = resolved.checkpoint
        cfg = ckpt.config
        context_limit = cfg.text.max_position_embeddings
        if not 1 <= options.mtp_draft_tokens <= 5:
            raise EngineError(f"mtp_draft_tokens {options.mtp_draft_tokens} is outside 1..5.")
        if options.max_context is not None:
            if options.max_context < 16:
                raise EngineError(f"max_context {options.max_context} is too small (at least 16 tokens).")
            context_limit = min(context_limit, options.max_context)
        backend, backend_note = choose_backend(options.backend)
        options = replace(options, backend=backend)
        if backend == "reference":
            model_obj, device = cls._load_reference(ckpt, options, report)
            plan = None
        else:
            model_obj, device, plan = cls._load_native(ckpt, options, context_limit, report)
        from engine.reference.vision import has_vision_weights

        vision_tower = bool(cfg.has_vision and has_vision_weights(ckpt))
        info = ModelInfo(name=resolved.name, path=str(resolved.path), random_weights=resolved.random_weights,
                         context_limit=context_limit,
                         # images run through the reference vision tower; the native engine has no vision path yet
                         has_vision=vision_tower and backend == "reference",
                         has_mtp=cfg.has_mtp, backend=backend, device=device, plan=plan,
                         vision_tower=vision_tower, backend_note=backend_note)
        engine = cls(model_obj, ckpt, info, options, resolved.chat_template)
        if options.prefix_disk_bytes > 0 and options.prefix_reuse:
            report(0.99, "Reading saved conversations")
            engine.open_state_store(resolved.path)
        report(1.0, "Ready")
        return engine

    @staticmethod
    def _load_reference(ckpt, options: EngineOptions, report: ProgressFn):
        import torch

        from engine.reference import ReferenceModel

        device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
        report(0.1, f"Loading weights on {device}")
        try:
            model = ReferenceModel.from_checkpoint(ckpt, device=device, dtype=torch.float32, gdn_mode="auto")
        except EngineError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"Could not load the model: {exc}") from exc
        return model, device

    @staticmethod
    def _load_native(ckpt, options: EngineOptions, context_limit: int, report: ProgressFn):
        from engine.native import native_status

        st = native_status()
        if not st.gpu_usable:
            raise BackendUnavailableError(f"The native backend needs a CUDA GPU: {st.reason}. "
                                          "Use the reference backend instead (`--backend reference` in the terminal, "
                                          "Settings → Engine backend in the app).")
        from engine.native_backend import CHAT_STEP_PATH_MAX_TOKENS, NativeModel, planned_mtp_drafts

        report(0.1, "Planning device memory")
        try:
            drafts = planned_mtp_drafts(ckpt.config, options.mtp_speculation, options.mtp_draft_tokens)
            model = NativeModel.from_checkpoint(ckpt, kv_dtype=options.kv_dtype, max_context=context_limit,
                                                vram_budget_bytes=options.vram_budget_bytes, progress=report,
                                                mtp_drafts=drafts)
        except EngineError:
            raise
        except MemoryError as exc:  # BudgetError: the plan's shortfall sentence, then its table
            raise ModelLoadError(str(exc)) from exc
        except (RuntimeError, ValueError) as exc:  # CudaError, NativeBackendError
            raise ModelLoadError(f"The native engine could not load this model: {exc}") from exc
        model.step_path_max_tokens = CHAT_STEP_PATH_MAX_TOKENS   # a short input runs as steps, not a prefill call
        plan = model.plan.as_dict() if hasattr(model, "plan") and hasattr(model.plan, "as_dict") else None
        return model, "cuda", plan

    def open_state_store(self, model_path: Path) -> None:
        """Saved states for this model (EngineOptions.prefix_disk_bytes): found by prompts from now on, and
        written when a conversation is set aside or the model unloaded. A store that cannot be opened (a
        read-only or missing disk) leaves the engine without one: the conversation is recomputed instead."""
        from engine.paths import states_dir
        from engine.prefix_store import PrefixStore

        if not hasattr(self._model, "export_snapshot"):
            return
        root = Path(self.options.prefix_disk_dir) if self.options.prefix_disk_dir else states_dir()
        try:
            self._store = PrefixStore(root, _state_identity(model_path, self._model.snapshot_layout()),
                                      self.options.prefix_disk_bytes)
        except OSError:
            self._store = None

    def unload(self) -> None:
        """Free the model. The newest conversation state is saved first (when a store is open and the state
        long enough), so the conversation resumes after a restart; then every pending write finishes."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        # a generation still running (a caller that dropped its iterator unfinished) keeps its state unsaved
        if self._store is not None and self._prefixes and self._lock.acquire(timeout=5.0):
            try:
                if self._model is not None:
                    self._save_state(self._prefixes[0], wait=True)
            finally:
                self._lock.release()
        self._model = None
        self._ckpt = None
        self._prefixes = []   # the snapshots' host memory (up to prefix_cache_bytes) goes with the model
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

    # ----------------------------------------------------------------- prompts
    def _render(self, messages: list[dict], enable_thinking: bool, tools) -> str:
        from engine.chat_template import render_chat

        if not messages:
            raise PromptError("The conversation is empty: write a message first.")
        last = messages[-1]
        if last.get("role") == "user" and not _message_has_content(last):
            raise PromptError("The message is empty: type something or attach an image.")
        return render_chat(self.chat_template, [_template_message(m) for m in messages], tools=tools,
                           add_generation_prompt=True, enable_thinking=enable_thinking)

    def _build_prompt(self, messages: list[dict], enable_thinking: bool, tools) -> _Prompt:
        text = self._render(messages, enable_thinking, tools)
        images = [part["image"] for m in messages for part in _parts(m) if part.get("type") == "image"]
        if images and not self.info.has_vision:
            raise PromptError("This model cannot read images here (no vision tower, or the native backend, "
                              "which has no vision path yet). Remove the image, or use a multimodal "
                              "checkpoint on the reference backend.")
        ids = self.tokenizer.encode(text, allow_special=True)
        prepared = []
        if images:
            from engine.image import preprocess_image

            prepared = [preprocess_image(img, self.config.vision) for img in images]
            ids = _expand_image_pads(ids, self.config.image_token_id, [p.num_llm_tokens for p in prepared])
        return _Prompt(text=text, ids=ids, images=prepared)

    def count_prompt_tokens(self, messages: list[dict], *, enable_thinking: bool, tools=None) -> int:
        text = self._render(messages, enable_thinking, tools)
        n = len(self.tokenizer.encode(text, allow_special=True))
        for m in messages:
            for part in _parts(m):
                if part.get("type") == "image":
                    from engine.image import inspect_image

                    n += inspect_image(part["image"]).num_llm_tokens - 1  # the template wrote one pad per image
        return n

    # -------------------------------------------------------------- generation
    def generate(self, messages: list[dict], sampling: SamplingParams | None = None, *, enable_thinking: bool = True,
                 tools=None, cancel: threading.Event | None = None) -> Iterator[GenEvent]:
        sampling = sampling or SamplingParams()
        sampling.validate()
        with self._lock:
            yield from self._generate_locked(messages, sampling, enable_thinking, tools, cancel)

    def _generate_locked(self, messages, sampling: SamplingParams, enable_thinking: bool, tools,
                         cancel: threading.Event | None) -> Iterator[GenEvent]:
        from engine.output_parser import OutputParser
        from engine.sampling import Sampler, StopChecker

        if self._model is None:
            raise EngineError("No model is loaded.")
        prompt = self._build_prompt(messages, enable_thinking, tools)
        n_prompt = len(prompt.ids)
        limit = self.info.context_limit
        if n_prompt >= limit:
            raise PromptError(f"The prompt is {n_prompt:,} tokens, over the context limit of {limit:,}. "
                              "Start a new conversation or remove earlier messages.")
        # max_tokens None: until the end of the turn or the context limit
        budget = limit - n_prompt if sampling.max_tokens is None else min(sampling.max_tokens, limit - n_prompt)

        eos = set(self.tokenizer.eos_ids) | set(self.config.text.eos_token_ids)
        sampler = Sampler(sampling, valid_vocab_size=self.tokenizer.vocab_size)
        stopper = StopChecker(sampling, eos_ids=sorted(eos))  # eos, stop ids, stop strings, max_tokens
        detok = self.tokenizer.stream_decoder(skip_special=True)
        parser = OutputParser.for_prompt(prompt.text, tools)

        t0 = time.perf_counter()
        speculate = self._can_speculate(prompt)
        native_spec = speculate and self.options.backend == "native"   # the hidden rows stay on the GPU
        # a speculative round runs up to mtp_draft_tokens past the last committed token before it is verified
        room = n_prompt + budget + 1 + (self.options.mtp_draft_tokens if speculate else 0)
        if self.options.backend == "native":
            # the native plan holds exactly the context limit: a reply that may run to it gets the lane's whole
            # context (the GPU loop stops queueing steps at the state's limit; speculative rounds draft fewer there)
            room = min(room, limit)
        state, logits, prompt_hidden, cached = self._prefill(prompt, room, cancel,
                                                             keep_hidden=speculate and not native_spec)
        t_prefill = time.perf_counter() - t0
        generated: list[int] = []
        reason = "length"  # the context limit, unless the stop checker says otherwise
        ended_by_stop_string = False
        ttft = None
        spec_stats = None
        if state is None:
            tokens = iter(())
        elif native_spec:
            from engine.speculative import SpecStats

            spec_stats = SpecStats()
            tokens = self._native_speculative_tokens(state, logits, sampler, prompt.ids, spec_stats)
        elif speculate:
            from engine.speculative import (MTPDrafter, SampledDrafter, SampledSpeculation, SpecStats,
                                            speculative_tokens)

            spec_stats = SpecStats()
            choose = lambda row, history: sampler.sample(row, history, prompt_ids=prompt.ids)  # noqa: E731
            verify = None   # greedy: the target's own choice decides
            if sampling.greedy:
                drafter = MTPDrafter(self._model, lambda row: choose(row, []))
            else:           # sampled: drafts drawn from the MTP head's distribution, kept by the rejection rule
                spec = SampledSpeculation(sampler, prompt.ids)
                drafter, verify = SampledDrafter(self._model, spec), spec.verify
            tokens = speculative_tokens(self._model, state, prompt_hidden, prompt.ids, logits, choose, drafter,
                                        spec_stats, verify, k=self.options.mtp_draft_tokens)
        else:
            tokens = self._plain_tokens(state, logits, sampler, prompt.ids)
        t_decode0 = time.perf_counter()
        try:
            for _, token in zip(range(budget), tokens):  # range first: no token is computed past the budget
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
                generated.append(token)
                if ttft is None:
                    ttft = time.perf_counter() - t0
                decision = stopper.push(token, detok.push(token))
                for d in parser.feed(decision.text):
                    yield TextDelta(d.channel, d.text)
                if decision.stop:
                    reason = decision.finish_reason or "stop"
                    ended_by_stop_string = isinstance(decision.matched, str)
                    break
        finally:
            if hasattr(tokens, "close"):
                tokens.close()  # the native loop drains its queued steps now, not when the frame is collected
        if state is None:
            reason = "cancelled"
        if not ended_by_stop_string:
            # Text still held back (a partial UTF-8 character, a possible stop string) is real output.
            for d in parser.feed(stopper.flush() + detok.flush()):
                yield TextDelta(d.channel, d.text)
        for d in parser.flush():
            yield TextDelta(d.channel, d.text)
        parsed = parser.finish()
        t_end = time.perf_counter()
        n_gen = len(generated)
        decode_s = t_end - t_decode0
        yield Finished(
            reason=reason,
            prompt_tokens=n_prompt,
            completion_tokens=n_gen,
            ttft_s=ttft,
            prefill_tok_s=((n_prompt - cached) / t_prefill
                           if t_prefill > 0 and n_prompt - cached >= PREFILL_RATE_MIN_TOKENS else None),
            decode_tok_s=(n_gen - 1) / decode_s if n_gen > 1 and decode_s > 0 else None,
            tool_calls=[{"name": c.name, "arguments": c.arguments} for c in parsed.tool_calls],
            spec_accept_rate=spec_stats.accept_rate if spec_stats is not None else None,
            cached_tokens=cached,
        )

    def _can_speculate(self, prompt: _Prompt) -> bool:
        """MTP drafting keeps the output's distribution (greedy, and sampled on the native engine: the same tokens);
        images would need 3-axis positions in the MTP pass."""
        return (self.options.mtp_speculation and mtp_can_draft(self.options.backend)
                and self.info.has_mtp and not prompt.images)

    def _plain_tokens(self, state, logits, sampler, prompt_ids: list[int]) -> Iterator[int]:
        """One trunk step per token. The native engine draws on the GPU and queues steps ahead of the host
        (engine.native_loop: the same draws as the host Sampler); otherwise lazily: the step after a token
        runs only when the next one is asked for."""
        if hasattr(self._model, "decode_tokens"):
            return self._model.decode_tokens(state, sampler.params, seed=sampler.seed,
                                             vocab_limit=sampler.valid_vocab_size, prompt_ids=prompt_ids)
        return self._host_tokens(state, logits, sampler, prompt_ids)

    def _native_speculative_tokens(self, state, logits, sampler, prompt_ids: list[int], stats) -> Iterator[int]:
        """Tokens on the native engine with MTP drafts: the first from the prompt's logits, as plain decoding draws
        it (the host Sampler, draw index 0), then engine.native_speculative's rounds with the same draws."""
        from engine.native_loop import device_sampling
        from engine.native_speculative import speculative_tokens

        first = sampler.sample(logits, [], prompt_ids=prompt_ids)
        yield first

        def plain_from(draw: int) -> Iterator[int]:
            # the lane's penalty counts already hold the prompt's marks and the committed tokens
            return self._model.decode_tokens(state, sampler.params, seed=sampler.seed,
                                             vocab_limit=sampler.valid_vocab_size, first_draw=draw)

        yield from speculative_tokens(self._model, state, first, k=self.options.mtp_draft_tokens,
                                      sampling=device_sampling(sampler.params, seed=sampler.seed,
                                                               vocab_limit=sampler.valid_vocab_size),
                                      prompt_ids=prompt_ids, stats=stats, plain_from=plain_from)

    def _host_tokens(self, state, logits, sampler, prompt_ids: list[int]) -> Iterator[int]:
        generated: list[int] = []
        while True:
            token = sampler.sample(logits, generated, prompt_ids=prompt_ids)
            generated.append(token)
            yield token
            logits = self._step(token, state)

    def _prefill(self, prompt: _Prompt, max_tokens: int, cancel: threading.Event | None, *, keep_hidden: bool = False):
        """Run the prompt through the model in chunks; return (state, logits of the last position, hidden, the
        number of prompt tokens resumed from the previous prompt's snapshot instead of computed).

        ``hidden`` is the trunk output at every prompt position when ``keep_hidden`` (the MTP head
        needs it), else None. Returns (None, None, None, 0) when cancelled between chunks."""
        import torch

        model = self._model
        ids = torch.tensor(prompt.ids, dtype=torch.long)
        cut = self._history_end(prompt, keep_hidden)
        state, start = None, 0
        match = self._longest_prefix(prompt.ids) if cut is not None else None
        if cut is not None and self._store is not None:
            match = self._read_saved_state(prompt.ids, match)
        if match is not None and not model.snapshot_needs_lane(match.state):
            match = self._on_the_lane(match)
        if match is not None:
            if model.snapshot_needs_lane(match.state):
                # the lane goes on from this earlier point: what later snapshots left on it gets overwritten
                self._prefixes = [p for p in self._prefixes if p is match or len(p.ids) <= len(match.ids)
                                  or not model.snapshot_needs_lane(p.state)]
            elif match is not self._prefixes[0]:
                self._set_aside_newest(keep=match)  # the lane is about to serve another conversation
            self._prefixes.remove(match)
            state = model.resume(match.state, max_tokens)
            if state is not None:                   # still valid: only later slots get written
                start = len(match.ids)
                self._prefixes.insert(0, match)
        if state is None:
            self._set_aside_newest()
            state = model.new_state(max_tokens)
        embeds = positions = None
        rope_delta = 0
        if prompt.images:
            embeds, positions, rope_delta = model.embed_multimodal(ids, prompt.images)
        # the native engine prefers longer calls (it chunks internally for its workspace)
        chunk = max(1, getattr(model, "preferred_prefill_call", 0) or self.options.prefill_chunk)
        # chunks end at the history's end (the snapshot point), then run on to the prompt's end
        stops = [e for e in (cut, len(prompt.ids)) if e is not None and e > start]
        logits = None
        hiddens = []
        s = start
        for stop in stops:
            while s < stop:
                if cancel is not None and cancel.is_set():
                    return None, None, None, 0
                e = min(s + chunk, stop)
                out = model.forward(ids[s:e], state,
                                    position_ids=None if positions is None else positions[:, s:e],
                                    inputs_embeds=None if embeds is None else embeds[s:e], last_only=True)
                logits = out.logits[-1]
                if keep_hidden:
                    hiddens.append(out.hidden)
                s = e
            # The snapshot advances whenever this prompt computed part of a long enough history, however short
            # that part (a turn of a few dozen tokens): were it kept where it was, every later turn would recompute
            # all the turns since, a cost that grows through the session; the copy costs the same every turn.
            if stop == cut and cut > start and cut >= self.options.prefix_reuse_min_tokens:
                try:
                    self._keep_newest(_PrefixSnapshot(list(prompt.ids[:cut]), model.snapshot(state)))
                except MemoryError:   # the host copy could not be made: this turn simply keeps no snapshot
                    pass
        state.rope_delta += rope_delta  # decode positions continue after the images' compressed span
        return state, logits, (torch.cat(hiddens) if keep_hidden else None), start

    def _longest_prefix(self, ids: list[int]) -> _PrefixSnapshot | None:
        """The kept snapshot covering the most of ``ids`` (its tokens start them, and some are left to prefill)."""
        from engine.prefix_store import longest_prefix

        return longest_prefix(self._prefixes, ids)

    def _on_the_lane(self, match: _PrefixSnapshot) -> _PrefixSnapshot:
        """``match`` (a detached snapshot) as one on the lane where the newest snapshot extends it: the lane already
        holds its KV slots, so neither setting the newest aside nor copying match's KV back is needed (an edited or
        regenerated earlier turn of the conversation on the GPU). ``match`` itself where that does not hold."""
        newest = self._prefixes[0]
        if newest is match or not self._model.snapshot_needs_lane(newest.state) \
                or newest.ids[:len(match.ids)] != match.ids:
            return match
        rebased = self._model.rebase(match.state, newest.state)
        if rebased is None:
            return match
        on_lane = _PrefixSnapshot(match.ids, rebased)
        self._prefixes[self._prefixes.index(match)] = on_lane
        return on_lane

    def _keep_newest(self, snap: _PrefixSnapshot) -> None:
        """``snap`` becomes the newest. Of those it extends (the same conversation's earlier turns) only the
        latest stays, so that editing the last message resumes from the turn before it; the rest are dropped."""
        extended = [p for p in self._prefixes if snap.ids[:len(p.ids)] == p.ids]
        previous = max(extended, key=lambda p: len(p.ids), default=None)
        self._prefixes = [snap] + [p for p in self._prefixes if p not in extended or p is previous]

    def _set_aside_newest(self, keep: _PrefixSnapshot | None = None) -> None:
        """Before the model serves another sequence: the newest snapshot, which may still depend on the GPU lane
        that sequence takes (native KV), is copied into host memory if the cache can hold it (the least recently
        used ones, other than ``keep``, leave to make room), and dropped otherwise. Older snapshots still on the
        lane lapse when it is claimed, and are dropped."""
        if not self._prefixes:
            return
        model, newest = self._model, self._prefixes[0]
        older = [p for p in self._prefixes[1:] if p is keep or not model.snapshot_needs_lane(p.state)]
        self._prefixes = older
        budget = self.options.prefix_cache_bytes
        need = model.snapshot_bytes(newest.state, detached=True)
        if need > budget or not host_can_hold(need):
            return
        while need + sum(model.snapshot_bytes(p.state) for p in older) > budget:
            evictable = [p for p in older if p is not keep]
            if not evictable:
                return
            older.remove(evictable[-1])              # the least recently used
        try:
            detached = model.detach(newest.state)
        except MemoryError:   # the cache is an optimisation: without room for the copy, the conversation recomputes
            detached = None
        self._prefixes = ([_PrefixSnapshot(newest.ids, detached)] if detached is not None else []) + older
        if detached is not None:
            self._save_state(self._prefixes[0])

    # ------------------------------------------------------------- saved states
    def _save_state(self, snap: _PrefixSnapshot, *, wait: bool = False) -> None:
        """Write ``snap`` to the store (when open, the state is long enough and not saved yet): on the writer
        thread, so that the next request does not wait for the disk, or here when ``wait``. A snapshot still on
        the lane is detached first (its KV copied to host memory, if there is room). Failures only mean the
        conversation is recomputed after a restart."""
        store, model = self._store, self._model
        if store is None or len(snap.ids) < self.options.prefix_disk_min_tokens or store.holds(snap.ids):
            return
        state = snap.state
        if model.snapshot_needs_lane(state):
            if not host_can_hold(model.snapshot_bytes(state, detached=True)):
                return
            try:
                state = model.detach(state)
            except MemoryError:
                return
            if state is None:
                return
        meta, arrays = model.export_snapshot(state)
        ids = list(snap.ids)
        if wait:
            store.save(ids, meta, arrays)
            return
        if self._writer is None:
            from concurrent.futures import ThreadPoolExecutor

            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="monorail-state-writer")
        self._writer.submit(store.save, ids, meta, arrays)

    def _read_saved_state(self, ids: list[int], match: _PrefixSnapshot | None) -> _PrefixSnapshot | None:
        """``match``, or a saved state that covers more of ``ids`` read back from the store (a detached snapshot,
        its arrays mapped from the file), kept as the least recently used snapshot until _prefill resumes it."""
        saved = self._store.longest_prefix(ids)
        if saved is None or (match is not None and len(match.ids) >= len(saved.ids)):
            return match
        loaded = self._store.load(saved)
        state = self._model.import_snapshot(*loaded) if loaded is not None else None
        if state is None:
            if loaded is not None:     # a state this model cannot take (its sizes differ): never offered again
                self._store.discard(saved)
            return match
        snap = _PrefixSnapshot(list(saved.ids), state)
        self._prefixes.append(snap)
        return snap

    def _history_end(self, prompt: _Prompt, keep_hidden: bool) -> int | None:
        """Where the prompt's history ends: before its last ``<|im_start|>`` (the generation prompt begins
        there, and a special token, it is never merged with the text before it, so the next turn's prompt
        repeats these tokens exactly). None where no snapshot is taken or used: the option is off, the backend
        cannot snapshot, the prompt has images (their positions would need carrying) or the MTP head needs
        every prompt position's hidden state."""
        if not self.options.prefix_reuse or prompt.images or keep_hidden or len(self._im_start) != 1 \
                or not (hasattr(self._model, "snapshot") and hasattr(self._model, "resume")):
            return None
        marker = self._im_start[0]
        for i in range(len(prompt.ids) - 1, 0, -1):
            if prompt.ids[i] == marker:
                return i
        return None

    def _step(self, token: int, state):
        import torch

        out = self._model.forward(torch.tensor([token], dtype=torch.long), state, last_only=True)
        return out.logits[-1]


def _state_identity(model_path: Path, layout: dict) -> str:
    """The folder name of a model's saved states: its weights' files (names, sizes, modification times) and the
    backend's state layout, hashed. A changed file or another KV format gives another folder, so a state is only
    ever resumed by the model that computed it."""
    import json

    import xxhash

    path = Path(model_path).resolve()
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file()
                                                 and p.suffix in (".safetensors", ".json", ".bin", ".gguf"))
    stamp = [[p.name, st.st_size, st.st_mtime_ns] for p, st in ((p, p.stat()) for p in files)]
    return xxhash.xxh3_128(json.dumps([str(path), stamp, layout], sort_keys=True, default=str).encode()).hexdigest()


def _parts(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, list):
        return [p for p in content if isinstance(p, dict)]
    return []


def _message_has_content(message: dict) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    return any((p.get("type") == "text" and p.get("text", "").strip()) or p.get("type") == "image"
               for p in _parts(message))


def _template_message(message: dict) -> dict:
    """The template needs only part types; image payloads (bytes) stay out of the renderer."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = []
    for p in content:
        if p.get("type") == "image":
            parts.append({"type": "image"})
        else:
            parts.append(p)
    return {**message, "content": parts}


def _expand_image_pads(ids: list[int], image_token_id: int, counts: list[int]) -> list[int]:
    """Replace the i-th single image pad the template wrote with counts[i] pads (one per merged patch)."""
    out: list[int] = []
    it = iter(counts)
    seen = 0
    for t in ids:
        if t == image_token_id:
            try:
                out.extend([image_token_id] * next(it))
            except StopIteration as exc:
                raise PromptError("The prompt has more image placeholders than attached images.") from exc
            seen += 1
        else:
            out.append(t)
    if seen != len(counts):
        raise PromptError(f"{len(counts)} images attached but the chat template placed {seen}.")
    return out
