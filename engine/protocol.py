"""The versioned message protocol between the GUI process and the engine worker process.

Plain, picklable dataclasses only: no Qt, no torch, no engine objects cross the queues.
The GUI puts *requests* on the request queue; the worker answers with *events* on the
event queue. Every event that belongs to a request carries its ``request_id``.

Bump ``PROTOCOL_VERSION`` whenever a field is added, removed or changes meaning; the
worker announces its version in ``WorkerReady`` and the GUI refuses a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 1


# ----------------------------------------------------------------------------- requests
@dataclass
class LoadModel:
    """Load (or replace) the model. ``options`` mirrors engine.api.EngineOptions as a dict;
    for the remote backend it holds base_url / api_key / remote_model instead."""
    request_id: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Generate:
    request_id: str
    messages: list[dict[str, Any]]          # OpenAI-style; image parts carry raw bytes
    sampling: dict[str, Any] = field(default_factory=dict)   # engine.sampling.SamplingParams fields
    enable_thinking: bool = True


@dataclass
class Cancel:
    request_id: str


@dataclass
class Unload:
    request_id: str


@dataclass
class ComputePlan:
    """Ask for the static memory plan of (model, options) without loading weights."""
    request_id: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Convert:
    """Convert a Hugging Face checkpoint folder to a Monorail artifact."""
    request_id: str
    source: str
    destination: str


@dataclass
class GetStats:
    """Ask the worker about itself (process memory, what is loaded, whether it is generating)."""
    request_id: str


@dataclass
class Shutdown:
    request_id: str = "shutdown"


Request = LoadModel | Generate | Cancel | Unload | ComputePlan | Convert | GetStats | Shutdown


# ----------------------------------------------------------------------------- events
@dataclass
class WorkerReady:
    protocol_version: int
    pid: int


@dataclass
class Progress:
    """Load or conversion progress: ``fraction`` in [0, 1]."""
    request_id: str
    fraction: float
    message: str = ""


@dataclass
class ModelLoaded:
    request_id: str
    name: str
    random_weights: bool
    context_limit: int
    has_vision: bool
    backend: str
    plan: dict[str, Any] | None = None
    vision_tower: bool = False      # the model has one, even where this backend cannot run it (has_vision False)
    backend_note: str = ""          # why this backend, when the settings asked for "auto"
    api_url: str = ""               # the OpenAI API the worker serves this model on (LoadModel option api_port)
    api_error: str = ""             # why that server could not start (the model is loaded all the same)


@dataclass
class Unloaded:
    request_id: str


@dataclass
class Delta:
    """Generated text on one channel: ``"reasoning"`` (thinking) or ``"content"``."""
    request_id: str
    channel: str
    text: str


@dataclass
class Finished:
    request_id: str
    reason: str                 # "stop" | "length" | "cancelled" | "error"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    spec_accept_rate: float | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens resumed from the previous turn (engine.api prefix reuse)


@dataclass
class PlanResult:
    request_id: str
    plan: dict[str, Any] | None
    text: str                   # the plan as a human-readable table


@dataclass
class Converted:
    request_id: str
    destination: str


@dataclass
class WorkerStats:
    request_id: str
    pid: int
    rss_bytes: int | None           # resident memory of the worker process
    model: str | None               # None: nothing loaded
    backend: str | None
    generating: bool


@dataclass
class WorkerError:
    """A typed, user-facing error. ``kind`` is the exception class name (e.g. "EngineError",
    "PromptTooLong", "ProtocolError"); ``message`` is meant to be shown as is."""
    request_id: str | None
    kind: str
    message: str


Event = (WorkerReady | Progress | ModelLoaded | Unloaded | Delta | Finished | PlanResult
         | Converted | WorkerStats | WorkerError)
