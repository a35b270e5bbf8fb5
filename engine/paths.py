"""Where Monorail keeps its files (XDG base directories; MONORAIL_DATA_DIR overrides both, for tests)."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    override = os.environ.get("MONORAIL_DATA_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "monorail"


def cache_dir() -> Path:
    """Files Monorail can always recompute (saved conversation states): XDG_CACHE_HOME; under the data folder when
    MONORAIL_DATA_DIR is set, so that a test's files stay in its own folder."""
    override = os.environ.get("MONORAIL_DATA_DIR")
    if override:
        return Path(override) / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "monorail"


def states_dir() -> Path:
    """Where conversation states saved across restarts live by default (engine.prefix_store)."""
    return cache_dir() / "states"


def models_dir() -> Path:
    return data_dir() / "models"


def resources_dir() -> Path:
    """The repository's resources/ folder (installed next to the packages in editable mode)."""
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "resources", here / "resources"):
        if cand.is_dir():
            return cand
    raise FileNotFoundError("resources/ folder not found next to the engine package")
