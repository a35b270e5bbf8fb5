"""User settings: one dataclass, saved as JSON in the XDG config directory.

MONORAIL_CONFIG_DIR overrides the folder (tests); when only MONORAIL_DATA_DIR is set, settings
live beside the data so one temporary folder isolates a whole test run.
"""

from __future__ import annotations

import json
import os
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
    local_backend: str = "reference"    # engine.api backend: "reference" | "native"
    remote_url: str = "http://localhost:8000/v1"
    remote_model: str = ""
    # engine
    max_context: int = 0                # 0 = the model's limit
    kv_dtype: str = "int8"
    vram_budget_gib: float = 0.0        # 0 = automatic (free memory minus a margin)
    mtp_speculation: bool = False       # draft with the model's MTP head (greedy requests, reference backend)
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
        if self.max_context:
            opts["max_context"] = int(self.max_context)
        if self.vram_budget_gib:
            opts["vram_budget_bytes"] = int(self.vram_budget_gib * 2**30)
        return opts

    def sampling_params(self) -> dict:
        return {**self.sampling, "max_tokens": int(self.max_tokens)}


def settings_path() -> Path:
    return config_dir() / "settings.json"


def load_settings() -> Settings:
    path = settings_path()
    if not path.exists():
        return Settings()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Settings()   # a damaged file must not stop the app; it is rewritten on the next save
    known = {f.name for f in fields(Settings)}
    return Settings(**{k: v for k, v in raw.items() if k in known})


def save_settings(settings: Settings) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)   # atomic: a crash never leaves half a settings file
