"""Interface language: English source strings, Simplified Chinese translations.

A plain table keeps translations reviewable in one file and needs no build step. ``tr`` returns
the English text for any string without a translation, so a missing entry is never a blank label.
The language is chosen at start-up from the settings (changing it asks for a restart).
"""

from __future__ import annotations

_language = "en"


def set_language(code: str) -> None:
    global _language
    _language = code if code in TRANSLATIONS or code == "en" else "en"


def language() -> str:
    return _language


def tr(text: str) -> str:
    return TRANSLATIONS.get(_language, {}).get(text, text)


from app.translations_zh_CN import ZH_CN  # noqa: E402

TRANSLATIONS: dict[str, dict[str, str]] = {"zh_CN": ZH_CN}
