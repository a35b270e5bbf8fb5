"""Every interface string has a Simplified Chinese translation with the same placeholders."""

from __future__ import annotations

import ast
import string
from pathlib import Path

from app import i18n
from app.translations_zh_CN import ZH_CN

APP = Path(__file__).resolve().parents[1] / "app"


def _literal_tr_strings() -> set[str]:
    found = set()
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tr" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                found.add(node.args[0].value)
    return found


def _fields(text: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}


def test_every_string_is_translated_with_matching_placeholders():
    strings = _literal_tr_strings()
    assert len(strings) > 100
    missing = sorted(strings - ZH_CN.keys())
    assert not missing, missing
    for src, zh in ZH_CN.items():
        assert _fields(src) == _fields(zh), src


def test_language_switch():
    try:
        i18n.set_language("zh_CN")
        assert i18n.tr("Send") == "发送"
        assert i18n.tr("a string nobody translated") == "a string nobody translated"
        i18n.set_language("xx")
        assert i18n.language() == "en" and i18n.tr("Send") == "Send"
    finally:
        i18n.set_language("en")
