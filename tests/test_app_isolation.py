"""The GUI process never imports torch or the native engine module."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_whole_app_does_not_import_torch(tmp_path):
    code = """
import os, sys, pkgutil, importlib
os.environ['QT_QPA_PLATFORM'] = 'offscreen'
import app
for m in pkgutil.walk_packages(app.__path__, 'app.'):
    importlib.import_module(m.name)
from app.main import build
qapp, window = build()                      # the whole window, NVML probe included (no worker started)
window.controller.store.close()
from app.attachments import image_tokens
image_tokens(640, 480)                      # runtime paths that reach into engine/ must stay light too
from app.widgets.settings_dialog import looks_like_hf_folder
looks_like_hf_folder('.')
print('torch' in sys.modules, 'engine._native' in sys.modules, 'transformers' in sys.modules)
"""
    env = {**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen", "MONORAIL_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False"]


def test_engine_layer_does_not_import_qt():
    code = "import sys, engine.worker, engine.protocol, engine.remote; print(any(m.startswith('PySide6') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_monorail_without_a_display_says_why():
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    out = subprocess.run([sys.executable, "-m", "engine.cli"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1 and "No graphical display" in out.stderr
