"""Settings round trip through the dialog, the API key store with its visible fallback, reloads."""

from __future__ import annotations

import json

import os
import stat

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import keyring  # noqa: E402
import pytest  # noqa: E402
from keyring.backend import KeyringBackend  # noqa: E402
from keyring.backends import fail  # noqa: E402

from app import keystore  # noqa: E402
from app.settings import Settings, load_settings, save_settings  # noqa: E402
from app.widgets.settings_dialog import SettingsDialog  # noqa: E402


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self):
        super().__init__()
        self.data = {}

    def set_password(self, service, username, password):
        self.data[(service, username)] = password

    def get_password(self, service, username):
        return self.data.get((service, username))

    def delete_password(self, service, username):
        self.data.pop((service, username), None)


@pytest.fixture(autouse=True)
def restore_keyring():
    """Tests swap the process-wide keyring backend; put the original back."""
    old = keyring.get_keyring()
    yield
    keyring.set_keyring(old)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    return tmp_path


def test_settings_round_trip_through_dialog(qtbot, data_dir):
    keyring.set_keyring(MemoryKeyring())
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    d.backend.setCurrentIndex(1)
    d.remote_url.setText("http://gpu-box:8000/v1")
    d.remote_model.setText("qwen3.6-27b")
    d.api_key.setText("sk-test")
    d.context.setValue(131072)
    d.kv.setCurrentText("bf16")
    d.budget.setValue(22.5)
    d.conversation_cache.setValue(2.5)
    d.saved_states.setValue(40.0)
    d.api_port.setValue(8123)
    assert not d.mtp_drafts.isEnabled()          # drafts a round only mean something with speculation on
    d.mtp.setChecked(True)
    assert d.mtp_drafts.isEnabled()
    d.mtp_drafts.setValue(5)
    d.preset.setCurrentText("Precise (greedy)")
    assert d.temperature.value() == 0.0
    d.sys_preset.setCurrentText("Coding")
    d.thinking.setChecked(False)
    d.theme.setCurrentIndex(2)
    d.language.setCurrentIndex(1)
    d.enter_sends.setChecked(False)
    d.tariff.setValue(0.25)
    d.accept()
    assert d.needs_reload()
    s = d.result_settings()
    save_settings(s)
    back = load_settings()
    assert back == s
    assert (back.backend, back.remote_url, back.remote_model) == ("remote", "http://gpu-box:8000/v1", "qwen3.6-27b")
    assert (back.max_context, back.kv_dtype, back.vram_budget_gib) == (131072, "bf16", 22.5)
    assert back.conversation_cache_gib == 2.5 and back.saved_states_gib == 40.0
    assert back.api_port == 8123
    assert back.mtp_speculation is True and back.mtp_draft_tokens == 5
    assert back.sampling["temperature"] == 0.0 and back.system_prompt.startswith("You are an expert programmer")
    assert (back.thinking_default, back.theme, back.language, back.enter_sends) == (False, "dark", "zh_CN", False)
    assert back.engine_options() == {"backend": "remote", "base_url": "http://gpu-box:8000/v1",
                                     "remote_model": "qwen3.6-27b"}
    assert keystore.get_api_key("http://gpu-box:8000/v1") == "sk-test"
    assert not (data_dir / "api-keys.json").exists()      # the keyring held it
    assert "OS keyring" in d.key_status.text()


def test_engine_backend_choice_in_the_dialog(qtbot, data_dir):
    keyring.set_keyring(MemoryKeyring())
    d = SettingsDialog(Settings(local_backend="native"))
    qtbot.addWidget(d)
    assert d.local_backend.currentData() == "native"
    assert [d.local_backend.itemData(i) for i in range(d.local_backend.count())] == ["auto", "native", "reference"]
    d.local_backend.setCurrentIndex(0)
    d.accept()
    assert d.needs_reload() and d.result_settings().local_backend == "auto"


def test_unchanged_settings_do_not_reload(qtbot, data_dir):
    keyring.set_keyring(MemoryKeyring())
    d = SettingsDialog(Settings(theme="dark"))
    qtbot.addWidget(d)
    d.accept()
    assert not d.needs_reload()


def test_local_engine_options():
    assert Settings().engine_options()["backend"] == "auto"    # native where a CUDA GPU is usable (engine.api)
    s = Settings(model="/m/q.monorail", max_context=65536, vram_budget_gib=20.0, local_backend="native")
    assert s.engine_options() == {"backend": "native", "kv_dtype": "int8", "max_context": 65536,
                                  "vram_budget_bytes": 20 * 2**30, "prefix_cache_bytes": 8 * 2**30,
                                  "prefix_disk_bytes": 16 * 2**30}
    assert Settings(conversation_cache_gib=0).engine_options()["prefix_cache_bytes"] == 0
    assert Settings(saved_states_gib=0).engine_options()["prefix_disk_bytes"] == 0
    assert "api_port" not in Settings().engine_options() and Settings(api_port=8000).engine_options()["api_port"] == 8000
    assert "mtp_draft_tokens" not in s.engine_options()
    s.mtp_speculation = True
    assert s.engine_options()["mtp_speculation"] is True and s.engine_options()["mtp_draft_tokens"] == 3


def test_the_app_and_the_engine_draft_the_same_number_a_round_by_default():
    """The app keeps its own default (it never imports the engine's modules in its process); the two must agree, as
    must `monorail chat --mtp-drafts`, so that one measured default (spec-decode-h100-s41-call2.json) holds everywhere."""
    import argparse

    from engine.api import DEFAULT_MTP_DRAFTS, EngineOptions
    from engine.commands import chat

    sub = argparse.ArgumentParser().add_subparsers()
    chat.register(sub)
    cli = sub.choices["chat"].parse_args([])
    assert Settings().mtp_draft_tokens == EngineOptions().mtp_draft_tokens == cli.mtp_drafts == DEFAULT_MTP_DRAFTS


def test_keyring_fallback_is_visible_and_private(qtbot, data_dir):
    keyring.set_keyring(fail.Keyring())
    status = keystore.set_api_key("http://x/v1", "sk-secret")
    assert not status.secure and "No Secret Service" in status.description
    path = data_dir / "api-keys.json"
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keystore.get_api_key("http://x/v1") == "sk-secret"
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    assert "No Secret Service" in d.key_status.text() and "api-keys.json" in d.key_status.text()
    keystore.set_api_key("http://x/v1", "")
    assert keystore.get_api_key("http://x/v1") == ""


def test_a_foreign_fallback_key_file_reads_as_no_keys(data_dir):
    keyring.set_keyring(fail.Keyring())
    for text in ("[1, 2]", '{"http://x/v1": 7}', "{broken"):
        keystore.fallback_path().write_text(text)
        assert keystore.get_api_key("http://x/v1") == ""


def test_damaged_settings_file_is_kept_aside_and_defaults_used(data_dir):
    from app.settings import load_settings_report

    for text in ("{not json", "[1, 2]", '"a string"'):
        (data_dir / "settings.json").write_text(text)
        loaded = load_settings_report()
        assert loaded.settings == Settings() and loaded.set_aside is not None and loaded.reason
        assert loaded.set_aside.read_text() == text and not (data_dir / "settings.json").exists()
        loaded.set_aside.unlink()


def test_unusable_saved_values_fall_back_one_by_one(data_dir):
    """Hand-edited or foreign values (the wrong type, an unknown choice, out of range) are reset by name and the
    rest is kept; before, a string temperature crashed the settings dialog and a JSON list crashed the start."""
    from app.settings import load_settings_report

    (data_dir / "settings.json").write_text(json.dumps({
        "max_tokens": "lots", "theme": "neon", "kv_dtype": "fp4", "sampling": {"temperature": "hot"},
        "vram_budget_gib": -3, "conversation_cache_gib": -1, "saved_states_gib": -2, "api_port": 70000,
        "enter_sends": 1, "tariff_per_kwh": float("nan"), "system_prompts": {"x": 5}, "mtp_draft_tokens": 9,
        "language": "zh_CN", "max_context": 65536, "local_backend": "native", "sampling_preset": "Mine",
        "not_a_setting": True}))
    loaded = load_settings_report()
    assert sorted(loaded.reset) == sorted(["max_tokens", "theme", "kv_dtype", "sampling", "vram_budget_gib",
                                           "conversation_cache_gib", "saved_states_gib", "api_port", "enter_sends",
                                           "tariff_per_kwh", "system_prompts", "mtp_draft_tokens"])
    s = loaded.settings
    assert (s.language, s.max_context, s.local_backend, s.sampling_preset) == ("zh_CN", 65536, "native", "Mine")
    assert s.max_tokens == Settings().max_tokens and s.sampling == Settings().sampling and loaded.set_aside is None


def test_memory_plan_is_shown_before_applying_and_apply_reloads(qtbot, tmp_path, monkeypatch):
    from test_app_support import close_window, make_window

    keyring.set_keyring(MemoryKeyring())
    w = make_window(qtbot, tmp_path, monkeypatch)
    try:
        first_load = w.controller.load_request
        d = SettingsDialog(w.settings, w.controller, w)
        qtbot.addWidget(d)
        d.context.setValue(8192)
        d.kv.setCurrentText("bf16")          # no click: the plan follows the settings
        qtbot.waitUntil(lambda: "KV pool" in d.plan_view.toPlainText() or "rror" in d.plan_view.toPlainText(),
                        timeout=60000)
        text = d.plan_view.toPlainText()
        assert "context 8,192, KV bf16" in text and "budget" in text
        d.accept()
        w.apply_settings(d.result_settings(), d.needs_reload())
        assert load_settings().kv_dtype == "bf16"
        qtbot.waitUntil(lambda: w.controller.load_request != first_load and w.controller.model is not None,
                        timeout=30000)
        assert w.controller.model.context_limit == 8192          # the fake engine echoes max_context
    finally:
        close_window(w)


def test_remote_backend_through_the_worker_with_fallback_key(qtbot, tmp_path, monkeypatch):
    """Remote endpoint chosen in settings; its key comes from the fallback store (no Secret Service)."""
    import threading
    from http.server import ThreadingHTTPServer

    from PySide6.QtCore import Qt

    from app.main import build
    from test_app_support import NoGpu
    from test_remote import _Handler

    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    keyring.set_keyring(fail.Keyring())
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    save_settings(Settings(backend="remote", remote_url=url, remote_model="qwen"))
    keystore.set_api_key(url, "sekret")
    _, w = build(nvml_source=NoGpu())             # default factory: engine.worker.load_engine
    qtbot.addWidget(w)
    w.controller.start()
    try:
        qtbot.waitUntil(lambda: w.controller.model is not None or w.banner.kind == "error", timeout=60000)
        assert w.controller.model is not None, w.banner.label.text()
        assert w.controller.model.backend == "remote" and w.controller.model.context_limit == 32768
        w.composer.set_text("hi remote")
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=30000)
        reply = w.controller.store.messages(w.controller.conversation_id)[-1]
        assert (reply.content, reply.reasoning, reply.status) == ("Hello there", "hmm ok", "done")
        assert (reply.prompt_tokens, reply.completion_tokens) == (12, 4)
    finally:
        w.controller.shutdown()
        w.controller.store.close()
        srv.shutdown()


def test_picking_an_hf_folder_starts_conversion_and_reports_errors(qtbot, tmp_path, monkeypatch):
    """The worker refuses this fake checkpoint; the dialog shows the converter's message, not a crash."""
    from PySide6.QtWidgets import QFileDialog

    from test_app_support import close_window, make_window

    keyring.set_keyring(MemoryKeyring())
    folder = tmp_path / "not-qwen"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    w = make_window(qtbot, tmp_path / "data", monkeypatch)
    try:
        d = SettingsDialog(w.settings, w.controller, w)
        qtbot.addWidget(d)
        monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
        d._pick_folder()
        assert d.model_path.text() == str(folder) and d.convert_button.isVisibleTo(d)
        assert d.convert_bar.isVisibleTo(d)
        qtbot.waitUntil(lambda: not d._pending, timeout=60000)
        assert "llama" in d.convert_label.text().lower() and not d.convert_bar.isVisibleTo(d)
    finally:
        close_window(w)


def test_the_dialog_shows_and_deletes_the_saved_conversation_states(qtbot, data_dir):
    keyring.set_keyring(MemoryKeyring())
    folder = data_dir / "cache" / "states" / "some-model"
    folder.mkdir(parents=True)
    (folder / "a.state").write_bytes(b"x" * (3 << 20))
    (folder / "b.state").write_bytes(b"x" * (1 << 20))
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    assert d.saved_states_usage.text() == "2 conversations saved, 4 MiB"
    assert d.delete_saved_states.isEnabled()
    d.delete_saved_states.click()
    assert not list(folder.parent.rglob("*.state"))
    assert d.saved_states_usage.text() == "No conversation saved on disk." and not d.delete_saved_states.isEnabled()
