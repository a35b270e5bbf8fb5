"""API keys for remote endpoints: the OS keyring, or a visible local fallback file.

``keyring`` picks the Secret Service (GNOME Keyring, KWallet) when one is running. Without one,
its chosen backend is the "fail" keyring (or raises), and we fall back to a 0600 JSON file in
the data directory. The caller learns which store was used so the settings page can say so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from engine.paths import data_dir

SERVICE = "monorail"


@dataclass
class KeyStoreStatus:
    secure: bool
    description: str    # shown to the user as is


def _keyring_usable():
    try:
        import keyring
        from keyring.backends import fail
    except Exception:
        return None
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 1) <= 0:
        return None
    return keyring


def fallback_path() -> Path:
    return data_dir() / "api-keys.json"


def _read_fallback() -> dict:
    """endpoint -> key from the fallback file; {} when it is missing, unreadable or not an object of strings."""
    try:
        data = json.loads(fallback_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _write_fallback(data: dict) -> None:
    path = fallback_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)


def key_store_status() -> KeyStoreStatus:
    kr = _keyring_usable()
    if kr is not None:
        return KeyStoreStatus(True, f"OS keyring ({type(kr.get_keyring()).__name__})")
    return KeyStoreStatus(False, f"No Secret Service found: the API key is stored unencrypted in {fallback_path()} "
                                 "(readable only by you). Install and unlock GNOME Keyring or KWallet to protect it.")


def set_api_key(endpoint: str, key: str) -> KeyStoreStatus:
    kr = _keyring_usable()
    if kr is not None:
        try:
            if key:
                kr.set_password(SERVICE, endpoint, key)
            else:
                try:
                    kr.delete_password(SERVICE, endpoint)
                except Exception:
                    pass
            return key_store_status()
        except Exception:
            pass   # a locked or broken keyring: fall through to the visible fallback
    data = _read_fallback()
    if key:
        data[endpoint] = key
    else:
        data.pop(endpoint, None)
    _write_fallback(data)
    return KeyStoreStatus(False, key_store_status().description if kr is None else
                          f"The OS keyring refused the key; it is stored unencrypted in {fallback_path()}.")


def get_api_key(endpoint: str) -> str:
    kr = _keyring_usable()
    if kr is not None:
        try:
            value = kr.get_password(SERVICE, endpoint)
            if value:
                return value
        except Exception:
            pass
    return _read_fallback().get(endpoint, "")
