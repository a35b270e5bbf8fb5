"""User settings: one dataclass, saved as JSON in the XDG config directory.

MONORAIL_CONFIG_DIR overrides the folder (tests); when only MONORAIL_DATA_DIR is set, settings
live beside the data so one temporary folder isolates a whole test run.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

SAMPLING_PRESETS: dict[str, dict] = {
    # Qwen's published recommendations for thinking / non-thinking use, and a deterministic one.
    "Thinking (recommended)": {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0},
    "Instruct": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0},
    "Precise (greedy)": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0},
    "Creative": {"temperature": 1.0, "top_p": 0.95, "top_k": 40, "min_p": 0.0},
}

DEFAULT_SYSTEM_PROMPTS: dict[str, str] = {
    "None": "",
    "Helpful assistant": "You are a helpful assistant.",
    "Coding": "You are an expert programmer. Answer with working code and short explanations.",
}

KV_FORMATS = ("bf16", "int8", "int4")
THEMES = ("system", "light", "dark")
LANGUAGES = ("en", "zh_CN")


def config_dir() -> Path:
    override = os.environ.get("MONORAIL_CONFIG_DIR") or os.environ.get("MONORAIL_DATA_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "monorail"


@dataclass
class Settings:
    # model and backend
    model: str = ""                     # "" = first run: the demo model is loaded
    backend: str = "local"              # "local" | "remote"
    local_backend: str = "auto"         # engine.api backend: "auto" (native where a CUDA GPU is usable) | "native" | "reference"
    remote_url: str = "http://localhost:8000/v1"
    remote_model: str = ""
    # engine
    max_context: int = 0                # 0 = the model's limit
    kv_dtype: str = "int8"
    vram_budget_gib: float = 0.0        # 0 = automatic (free memory minus a margin)
    mtp_speculation: bool = False       # draft with the model's MTP head (every reply)
    mtp_draft_tokens: int = 3           # drafts a round, 1..5 (3: the best measured speed-up at 60-100 % acceptance)
    conversation_cache_gib: float = 8.0  # RAM for conversations set aside (engine.api prefix_cache_bytes); 0 = off
    saved_states_gib: float = 16.0      # disk for conversation states kept across restarts (prefix_disk_bytes); 0 = off
    api_port: int = 0                   # serve the loaded model's OpenAI API on 127.0.0.1:port (engine.server); 0 = off
    # generation
    sampling_preset: str = "Thinking (recommended)"
    sampling: dict = field(default_factory=lambda: dict(SAMPLING_PRESETS["Thinking (recommended)"]))
    max_tokens: int = 4096
    system_prompt_preset: str = "None"
    system_prompts: dict = field(default_factory=lambda: dict(DEFAULT_SYSTEM_PROMPTS))
    thinking_default: bool = True
    # interface
    theme: str = "system"
    language: str = "en"
    enter_sends: bool = True            # False: Ctrl+Enter sends, Enter adds a line
    # energy
    tariff_per_kwh: float = 0.30
    currency: str = "€"

    @property
    def system_prompt(self) -> str:
        return self.system_prompts.get(self.system_prompt_preset, "")

    def engine_options(self) -> dict:
        """Options for protocol.LoadModel (the API key is added by the caller from the key store)."""
        if self.backend == "remote":
            return {"backend": "remote", "base_url": self.remote_url, "remote_model": self.remote_model}
        opts: dict = {"backend": self.local_backend, "kv_dtype": self.kv_dtype}
        if self.mtp_speculation:
            opts["mtp_speculation"] = True
            opts["mtp_draft_tokens"] = int(self.mtp_draft_tokens)
        if self.max_context:
            opts["max_context"] = int(self.max_context)
        if self.vram_budget_gib:
            opts["vram_budget_bytes"] = int(self.vram_budget_gib * 2**30)
        opts["prefix_cache_bytes"] = int(self.conversation_cache_gib * 2**30)
        opts["prefix_disk_bytes"] = int(self.saved_states_gib * 2**30)
        if self.api_port:
            opts["api_port"] = int(self.api_port)
        return opts

    def sampling_params(self) -> dict:
        return {**self.sampling, "max_tokens": int(self.max_tokens)}


def settings_path() -> Path:
    return config_dir() / "settings.json"


@dataclass
class LoadedSettings:
    settings: Settings
    reset: list[str] = field(default_factory=list)   # fields whose stored values were unusable: back at defaults
    set_aside: Path | None = None                    # an unreadable file, kept under this name
    reason: str = ""                                 # why it was unreadable


LOCAL_BACKENDS = ("auto", "native", "reference")   # engine.api.BACKENDS (the app does not import the engine)
_CHOICES = {"backend": ("local", "remote"), "local_backend": LOCAL_BACKENDS, "kv_dtype": KV_FORMATS,
            "theme": THEMES, "language": LANGUAGES}
_MINIMUM = {"max_context": 0, "vram_budget_gib": 0.0, "conversation_cache_gib": 0.0, "saved_states_gib": 0.0,
            "max_tokens": 1, "tariff_per_kwh": 0.0, "api_port": 0, "mtp_draft_tokens": 1}
_MAXIMUM = {"api_port": 65535, "mtp_draft_tokens": 5}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _usable(name: str, value, default) -> bool:
    """Whether a stored value can stand in for ``default``: same type, a known choice, within range."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = _is_number(value)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif name == "sampling":
        ok = isinstance(value, dict) and all(isinstance(k, str) and _is_number(v) for k, v in value.items())
    elif isinstance(default, dict):
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    else:
        ok = False
    if ok and name in _CHOICES:
        ok = value in _CHOICES[name]
    if ok and name in _MINIMUM:
        ok = value >= _MINIMUM[name]
    if ok and name in _MAXIMUM:
        ok = value <= _MAXIMUM[name]
    return ok


def load_settings_report() -> LoadedSettings:
    """The saved settings, and what could not be used. A file that is not a JSON object is kept as
    ``settings.json.damaged-<time>`` (the next save would overwrite it) and defaults are used; a value of
    the wrong type, an unknown choice or one out of range falls back to its default, by name."""
    path = settings_path()
    if not path.exists():
        return LoadedSettings(Settings())
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"a JSON {type(raw).__name__}, not an object")
    except (OSError, ValueError) as exc:   # a damaged file must not stop the app, nor be lost
        kept = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            path.replace(kept)
        except OSError:
            kept = None
        return LoadedSettings(Settings(), set_aside=kept, reason=str(exc))
    defaults = Settings()
    values, reset = {}, []
    for f in fields(Settings):
        if f.name not in raw:
            continue
        if _usable(f.name, raw[f.name], getattr(defaults, f.name)):
            values[f.name] = raw[f.name]
        else:
            reset.append(f.name)
    return LoadedSettings(Settings(**values), reset=reset)


def load_settings() -> Settings:
    return load_settings_report().settings


def save_settings(settings: Settings) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)   # atomic: a crash never leaves half a settings file
