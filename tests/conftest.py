"""Shared pytest fixtures. Keep this small and additive: one fixture per shared resource.

Tiny checkpoints take a few seconds to build, so they are built once per session.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/tiny_models.py importable as `tiny_models`


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory):
    """(transformers Qwen3_5ForConditionalGeneration in fp32 eval mode, checkpoint folder) with vision + MTP."""
    pytest.importorskip("transformers")
    from tiny_models import make_tiny_hf_model
    return make_tiny_hf_model(tmp_path_factory.mktemp("tiny_mm"), seed=0)


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_hf) -> Path:
    """Folder of a tiny multimodal checkpoint (model.language_model.* layout, vision, MTP shard, fp32)."""
    return tiny_hf[1]


@pytest.fixture(scope="session")
def tiny_text_hf(tmp_path_factory):
    """(transformers Qwen3_5ForCausalLM in fp32 eval mode, folder) in the text-only model.* layout, with MTP."""
    pytest.importorskip("transformers")
    from tiny_models import make_tiny_hf_model
    return make_tiny_hf_model(tmp_path_factory.mktemp("tiny_text"), seed=1, text_only_layout=True, vision=False)


@pytest.fixture(scope="session")
def tiny_native_ckpt(tmp_path_factory):
    """A tiny text checkpoint at the native kernels' head sizes (head_dim 256, GDN heads of 128)."""
    pytest.importorskip("transformers")
    from tiny_models import TinyShape, make_tiny_hf_model
    shape = TinyShape(hidden_size=256, intermediate_size=512, linear_head_dim=128)
    _, path = make_tiny_hf_model(tmp_path_factory.mktemp("tiny_native"), seed=5, vision=False, mtp=False,
                                 text_only_layout=True, vocab_size=1024, num_hidden_layers=8, shape=shape)
    return path


@pytest.fixture(scope="session")
def tiny_native_mtp_ckpt(tmp_path_factory):
    """tiny_native_ckpt's shapes with an MTP head (intermediate 2 x hidden: the head's fc input buffer)."""
    pytest.importorskip("transformers")
    from tiny_models import TinyShape, make_tiny_hf_model
    shape = TinyShape(hidden_size=256, intermediate_size=512, linear_head_dim=128)
    _, path = make_tiny_hf_model(tmp_path_factory.mktemp("tiny_native_mtp"), seed=6, vision=False, mtp=True,
                                 text_only_layout=True, vocab_size=1024, num_hidden_layers=8, shape=shape)
    return path


def pytest_sessionfinish(session, exitstatus):
    """Empty the Qt clipboard while Python is still alive.

    Tests put Python-created QMimeData on the clipboard (paste tests); Qt's own exit handlers would
    otherwise destroy it after the interpreter has finalised, which segfaults the process at exit
    (seen: SIGSEGV in Shiboken::Object::destroy from libQt6Gui's exit handler) and fails CI.
    """
    import sys

    qtgui = sys.modules.get("PySide6.QtGui")
    if qtgui is None:
        return
    app = qtgui.QGuiApplication.instance()
    if app is not None:
        app.clipboard().clear()
        app.processEvents()


@pytest.fixture(scope="module")
def nat():
    """The compiled native module (GPU tests; they skip without a usable GPU before asking for it)."""
    from engine.native import load_native
    return load_native()


@pytest.fixture(scope="module")
def demo_engine(tmp_path_factory):
    """engine.api.Engine on the built-in demo model (reference backend), 4096 tokens, in its own data folder."""
    from engine.api import Engine, EngineOptions
    mp = pytest.MonkeyPatch()
    mp.setenv("MONORAIL_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    try:
        yield Engine.load("demo", EngineOptions(max_context=4096))
    finally:
        mp.undo()
