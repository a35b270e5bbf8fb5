"""Settings: model, backend (local / remote with its key), engine memory, generation, interface, energy.

The memory plan for the chosen (model, context, KV format, budget) is computed by the worker
(engine.plan needs the engine, never imported here) and shown before the settings are applied.
"""

from __future__ import annotations

import copy
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog,
                               QFormLayout, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QProgressBar, QPushButton,
                               QSpinBox, QTabWidget, QVBoxLayout, QWidget)

from app.i18n import tr
from app.keystore import get_api_key, key_store_status, set_api_key
from app.widgets.dashboard import format_plan
from app.settings import KV_FORMATS, LANGUAGES, SAMPLING_PRESETS, THEMES, Settings
from engine import protocol as P
from engine.paths import models_dir

LANGUAGE_NAMES = {"en": "English", "zh_CN": "简体中文"}


def looks_like_hf_folder(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "config.json").exists() and any(p.glob("*.safetensors"))


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, controller=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(tr("Settings"))
        self.resize(640, 560)
        self.original = settings
        self.s = copy.deepcopy(settings)
        self.controller = controller
        self._pending: dict[str, str] = {}     # request id -> "plan" | "convert"
        self.key_status_text = ""
        self._reload: bool | None = None
        tabs = QTabWidget()
        tabs.addTab(self._model_tab(), tr("Model"))
        tabs.addTab(self._engine_tab(), tr("Memory"))
        tabs.addTab(self._generation_tab(), tr("Generation"))
        tabs.addTab(self._interface_tab(), tr("Interface"))
        self.tabs = tabs
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(tabs)
        lay.addWidget(buttons)
        if controller is not None:
            controller.worker_event.connect(self._on_worker_event)

    # -- tabs -------------------------------------------------------------------------------------
    def _model_tab(self) -> QWidget:
        w = QWidget()
        f = QFormLayout(w)
        self.backend = QComboBox()
        self.backend.addItem(tr("This computer (Monorail engine)"), "local")
        self.backend.addItem(tr("Remote OpenAI-compatible server"), "remote")
        self.backend.setCurrentIndex(0 if self.s.backend == "local" else 1)
        self.backend.currentIndexChanged.connect(self._backend_changed)
        f.addRow(tr("Backend"), self.backend)

        self.model_path = QLineEdit(self.s.model)
        self.model_path.setPlaceholderText(tr("empty: the built-in demo model (random weights)"))
        row = QHBoxLayout()
        row.addWidget(self.model_path, 1)
        pick_file = QPushButton(tr("Artifact…"))
        pick_file.clicked.connect(self._pick_artifact)
        pick_dir = QPushButton(tr("HF folder…"))
        pick_dir.clicked.connect(self._pick_folder)
        row.addWidget(pick_file)
        row.addWidget(pick_dir)
        self.local_rows = [row]
        f.addRow(tr("Model"), row)
        self.local_backend = QComboBox()
        for label, b in ((tr("auto: native where a CUDA GPU is usable, else reference"), "auto"),
                         (tr("native (the CUDA engine)"), "native"), (tr("reference (torch, slow: for checking)"), "reference")):
            self.local_backend.addItem(label, b)
        self.local_backend.setCurrentIndex(max(0, self.local_backend.findData(self.s.local_backend)))
        f.addRow(tr("Engine backend"), self.local_backend)
        self.convert_button = QPushButton(tr("Convert this Hugging Face folder"))
        self.convert_button.clicked.connect(self._convert)
        self.convert_bar = QProgressBar()
        self.convert_bar.setRange(0, 1000)
        self.convert_bar.hide()
        self.convert_label = QLabel()
        self.convert_label.setWordWrap(True)
        f.addRow("", self.convert_button)
        f.addRow("", self.convert_bar)
        f.addRow("", self.convert_label)

        self.remote_url = QLineEdit(self.s.remote_url)
        self.remote_model = QLineEdit(self.s.remote_model)
        self.api_key = QLineEdit(get_api_key(self.s.remote_url))
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_status = QLabel()
        self.key_status.setObjectName("keyStatus")
        self.key_status.setWordWrap(True)
        f.addRow(tr("Endpoint URL"), self.remote_url)
        f.addRow(tr("Model name"), self.remote_model)
        f.addRow(tr("API key"), self.api_key)
        f.addRow("", self.key_status)
        self._show_key_status()
        self._backend_changed()
        self.model_path.textChanged.connect(self._model_path_changed)
        self._model_path_changed()
        return w

    def _engine_tab(self) -> QWidget:
        w = QWidget()
        f = QFormLayout(w)
        self.context = QSpinBox()
        self.context.setRange(0, 262_144)
        self.context.setSingleStep(4096)
        self.context.setSpecialValueText(tr("model limit"))
        self.context.setValue(self.s.max_context)
        f.addRow(tr("Context (tokens)"), self.context)
        self.kv = QComboBox()
        self.kv.addItems(list(KV_FORMATS))
        self.kv.setCurrentText(self.s.kv_dtype)
        f.addRow(tr("KV cache format"), self.kv)
        self.budget = _gib_box(256, tr("automatic (free memory minus a margin)"), self.s.vram_budget_gib)
        f.addRow(tr("VRAM budget"), self.budget)
        self.conversation_cache = _gib_box(1024, tr("off (only the current conversation)"),
                                           self.s.conversation_cache_gib)
        self.conversation_cache.setToolTip(tr(
            "Host memory for the state of conversations you switched away from, so that coming back to one does "
            "not process its whole history again (a 128K-token conversation takes about 4.3 GiB)."))
        f.addRow(tr("Conversation cache (RAM)"), self.conversation_cache)
        self.saved_states = _gib_box(4096, tr("off (recompute after a restart)"), self.s.saved_states_gib)
        self.saved_states.setToolTip(tr(
            "Disk space for the state of long conversations, written when you switch away from one and when the "
            "app closes, so that after a restart a conversation goes on without processing its whole history "
            "again. The least recently used are removed first; off deletes them."))
        f.addRow(tr("Conversation cache (disk)"), self.saved_states)
        self.saved_states_usage = QLabel()
        self.delete_saved_states = QPushButton(tr("Delete saved states"))
        self.delete_saved_states.clicked.connect(self._delete_saved_states)
        usage_row = QHBoxLayout()
        usage_row.addWidget(self.saved_states_usage, 1)
        usage_row.addWidget(self.delete_saved_states)
        f.addRow("", usage_row)
        self._show_saved_states_usage()
        self.api_port = QSpinBox()
        self.api_port.setRange(0, 65535)
        self.api_port.setSpecialValueText(tr("off"))
        self.api_port.setValue(self.s.api_port)
        self.api_port.setToolTip(tr(
            "Serve the loaded model to agents and editors over the OpenAI chat-completions API at "
            "http://127.0.0.1:PORT/v1 (this computer only), sharing the app's model and memory."))
        f.addRow(tr("Local API server port"), self.api_port)
        self.mtp = QCheckBox(tr("Speculative decoding with the MTP head"))
        self.mtp.setChecked(self.s.mtp_speculation)
        self.mtp.setToolTip(tr(
            "Drafts tokens with the model's own MTP head and checks them in one step. Replies keep their tokens "
            "(greedy, and on the native engine sampled ones for their seed) or their distribution (sampled ones on "
            "the reference backend)."))
        f.addRow(tr("Speculation"), self.mtp)
        self.mtp_drafts = QSpinBox()
        self.mtp_drafts.setRange(1, 5)
        self.mtp_drafts.setValue(self.s.mtp_draft_tokens)
        self.mtp_drafts.setEnabled(self.s.mtp_speculation)
        self.mtp_drafts.setToolTip(tr(
            "Tokens the MTP head drafts before each check. More drafts pay when most are right; replies whose drafts "
            "are mostly wrong go on without drafting."))
        self.mtp.toggled.connect(self.mtp_drafts.setEnabled)
        f.addRow(tr("Drafts a round"), self.mtp_drafts)
        self.plan_button = QPushButton(tr("Show memory plan"))
        self.plan_button.clicked.connect(self.request_plan)
        # The plan follows the settings as they change (debounced), so it is seen before OK.
        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(400)
        self._plan_timer.timeout.connect(self.request_plan)
        for signal in (self.context.valueChanged, self.kv.currentIndexChanged, self.budget.valueChanged,
                       self.mtp.toggled, self.mtp_drafts.valueChanged):   # the head and its checkpoints take memory
            signal.connect(lambda *_: self._plan_timer.start())
        f.addRow("", self.plan_button)
        self.plan_view = QPlainTextEdit()
        self.plan_view.setReadOnly(True)
        self.plan_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.plan_view.setPlaceholderText(tr("The plan lists every device allocation before anything is loaded."))
        f.addRow(self.plan_view)
        return w

    def _generation_tab(self) -> QWidget:
        w = QWidget()
        f = QFormLayout(w)
        self.preset = QComboBox()
        self.preset.addItems(list(SAMPLING_PRESETS))
        self.preset.setCurrentText(self.s.sampling_preset)
        self.preset.currentTextChanged.connect(self._preset_changed)
        f.addRow(tr("Sampling preset"), self.preset)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0, 2)
        self.temperature.setSingleStep(0.05)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0, 1)
        self.top_p.setSingleStep(0.05)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText(tr("off"))
        for label, box, key in ((tr("Temperature"), self.temperature, "temperature"), ("top-p", self.top_p, "top_p"),
                                ("top-k", self.top_k, "top_k")):
            box.setValue(self.s.sampling.get(key, 0))
            f.addRow(label, box)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(16, 262_144)
        self.max_tokens.setValue(self.s.max_tokens)
        f.addRow(tr("Max output tokens"), self.max_tokens)
        self.thinking = QCheckBox(tr("Think before answering (default for new messages)"))
        self.thinking.setChecked(self.s.thinking_default)
        f.addRow(self.thinking)
        self.sys_preset = QComboBox()
        self.sys_preset.addItems(list(self.s.system_prompts))
        self.sys_preset.setCurrentText(self.s.system_prompt_preset)
        self.sys_preset.currentTextChanged.connect(self._sys_preset_changed)
        f.addRow(tr("System prompt preset"), self.sys_preset)
        self.sys_text = QPlainTextEdit(self.s.system_prompt)
        self.sys_text.setFixedHeight(80)
        f.addRow(self.sys_text)
        return w

    def _interface_tab(self) -> QWidget:
        w = QWidget()
        f = QFormLayout(w)
        self.theme = QComboBox()
        for t in THEMES:
            self.theme.addItem(tr(t.capitalize()), t)
        self.theme.setCurrentIndex(THEMES.index(self.s.theme) if self.s.theme in THEMES else 0)
        f.addRow(tr("Theme"), self.theme)
        self.language = QComboBox()
        for code in LANGUAGES:
            self.language.addItem(LANGUAGE_NAMES[code], code)
        self.language.setCurrentIndex(LANGUAGES.index(self.s.language) if self.s.language in LANGUAGES else 0)
        f.addRow(tr("Language (after restart)"), self.language)
        self.enter_sends = QCheckBox(tr("Enter sends (Shift+Enter adds a line); off: Ctrl+Enter sends"))
        self.enter_sends.setChecked(self.s.enter_sends)
        f.addRow(self.enter_sends)
        self.tariff = QDoubleSpinBox()
        self.tariff.setRange(0, 10)
        self.tariff.setDecimals(3)
        self.tariff.setValue(self.s.tariff_per_kwh)
        self.currency = QLineEdit(self.s.currency)
        self.currency.setMaxLength(4)
        f.addRow(tr("Electricity tariff per kWh"), self.tariff)
        f.addRow(tr("Currency symbol"), self.currency)
        return w

    # -- behaviour -----------------------------------------------------------------------------------
    def _backend_changed(self) -> None:
        remote = self.backend.currentData() == "remote"
        for wdg in (self.remote_url, self.remote_model, self.api_key, self.key_status):
            wdg.setEnabled(remote)
        for wdg in (self.model_path, self.local_backend, self.convert_button):
            wdg.setEnabled(not remote)

    def _model_path_changed(self) -> None:
        self.convert_button.setVisible(looks_like_hf_folder(self.model_path.text().strip()))

    def _pick_artifact(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, tr("Pick a Monorail model"), str(models_dir()),
                                              "Monorail model (*.safetensors *.monorail);;All files (*)")
        if path:
            self.model_path.setText(path)

    def _pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, tr("Pick a Hugging Face checkpoint folder"))
        if path:
            self.model_path.setText(path)
            if looks_like_hf_folder(path):
                self._convert()   # a picked checkpoint becomes an artifact; the engine can also load it as is

    def _show_saved_states_usage(self) -> None:
        from engine.paths import states_dir
        from engine.prefix_store import usage

        count, nbytes = usage(states_dir())
        self.saved_states_usage.setText(saved_states_usage_text(count, nbytes))
        self.delete_saved_states.setEnabled(count > 0)

    def _delete_saved_states(self) -> None:
        """Free the disk now (the conversations themselves stay in the history; they are recomputed when resumed)."""
        from engine.paths import states_dir
        from engine.prefix_store import remove_all

        remove_all(states_dir())
        self._show_saved_states_usage()

    def _show_key_status(self) -> None:
        st = key_store_status()
        self.key_status_text = st.description
        self.key_status.setText(("🔒 " if st.secure else "⚠ ") + st.description)

    def _preset_changed(self, name: str) -> None:
        preset = SAMPLING_PRESETS.get(name, {})
        self.temperature.setValue(preset.get("temperature", 0.7))
        self.top_p.setValue(preset.get("top_p", 1.0))
        self.top_k.setValue(preset.get("top_k", 0))

    def _sys_preset_changed(self, name: str) -> None:
        self.sys_text.setPlainText(self.s.system_prompts.get(name, ""))

    def _send(self, kind: str, make) -> None:
        if self.controller is None or not self.controller.client.alive:
            self._show_result(kind, tr("The engine is not running; restart it first."))
            return
        self._pending[make()] = kind

    def request_plan(self) -> None:
        s = self.result_settings()
        self.plan_view.setPlainText(tr("Computing the memory plan…"))
        self._send("plan", lambda: self.controller.client.compute_plan(s.model or "demo", s.engine_options()))

    def _convert(self) -> None:
        src = self.model_path.text().strip()
        dst = str(models_dir() / (Path(src).name + ".monorail"))
        self.convert_bar.show()
        self.convert_label.setText(tr("Converting to {dst}…").format(dst=dst))
        self._send("convert", lambda: self.controller.client.convert(src, dst))

    def _show_result(self, kind: str, text: str) -> None:
        if kind == "plan":
            self.plan_view.setPlainText(text)
        else:
            self.convert_bar.hide()
            self.convert_label.setText(text)

    def _on_worker_event(self, ev) -> None:
        kind = self._pending.get(getattr(ev, "request_id", None) or "")
        if kind is None:
            return
        if isinstance(ev, P.Progress):
            self.convert_bar.setValue(int(ev.fraction * 1000))
            self.convert_label.setText(ev.message)
            return
        self._pending.pop(ev.request_id, None)
        if isinstance(ev, P.PlanResult):
            self._show_result("plan", ev.text or format_plan(ev.plan))
        elif isinstance(ev, P.Converted):
            self.model_path.setText(ev.destination)
            self._show_result("convert", tr("Converted. The new model will load when you press OK."))
        elif isinstance(ev, P.WorkerError):
            self._show_result(kind, ev.message)

    # -- result ---------------------------------------------------------------------------------------
    def result_settings(self) -> Settings:
        s = copy.deepcopy(self.s)
        s.backend = self.backend.currentData()
        s.model = self.model_path.text().strip()
        s.local_backend = self.local_backend.currentData()
        s.remote_url = self.remote_url.text().strip()
        s.remote_model = self.remote_model.text().strip()
        s.max_context = self.context.value()
        s.kv_dtype = self.kv.currentText()
        s.vram_budget_gib = self.budget.value()
        s.conversation_cache_gib = self.conversation_cache.value()
        s.saved_states_gib = self.saved_states.value()
        s.mtp_speculation = self.mtp.isChecked()
        s.mtp_draft_tokens = self.mtp_drafts.value()
        s.api_port = self.api_port.value()
        s.sampling_preset = self.preset.currentText()
        s.sampling = {**s.sampling, "temperature": self.temperature.value(), "top_p": self.top_p.value(),
                      "top_k": self.top_k.value()}
        s.max_tokens = self.max_tokens.value()
        s.thinking_default = self.thinking.isChecked()
        s.system_prompt_preset = self.sys_preset.currentText()
        s.system_prompts = {**s.system_prompts, s.system_prompt_preset: self.sys_text.toPlainText()}
        s.theme = self.theme.currentData()
        s.language = self.language.currentData()
        s.enter_sends = self.enter_sends.isChecked()
        s.tariff_per_kwh = self.tariff.value()
        s.currency = self.currency.text() or self.s.currency
        return s

    def needs_reload(self) -> bool:
        """Whether the model must be loaded again (decided when OK is pressed, before the key is saved)."""
        return self._reload if self._reload is not None else self._differs()

    def _differs(self) -> bool:
        a, b = self.original, self.result_settings()
        return a.engine_options() != b.engine_options() or a.model != b.model or \
            (b.backend == "remote" and self.api_key.text() != get_api_key(b.remote_url))

    def accept(self) -> None:
        s = self.result_settings()
        self._reload = self._differs()
        if s.backend == "remote":
            status = set_api_key(s.remote_url, self.api_key.text())
            self.key_status_text = status.description
        super().accept()


def saved_states_usage_text(count: int, nbytes: int) -> str:
    """What ``count`` saved conversation states of ``nbytes`` take on disk, in words."""
    if count == 0:
        return tr("No conversation saved on disk.")
    size = f"{nbytes / 2**30:.1f} GiB" if nbytes >= 100 * 2**20 else f"{nbytes / 2**20:.0f} MiB"
    if count == 1:
        return tr("1 conversation saved, {size}").format(size=size)
    return tr("{n} conversations saved, {size}").format(n=count, size=size)


def _gib_box(maximum: float, zero_text: str, value: float) -> QDoubleSpinBox:
    """A size in GiB from 0 (shown as ``zero_text``) to ``maximum``, one decimal."""
    box = QDoubleSpinBox()
    box.setRange(0, maximum)
    box.setDecimals(1)
    box.setSuffix(" GiB")
    box.setSpecialValueText(zero_text)
    box.setValue(value)
    return box
