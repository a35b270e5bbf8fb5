"""The main window: sidebar | chat (banner, header, messages, composer) | dashboard tab."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QMainWindow, QMessageBox, QProgressBar, QSplitter,
                               QTabWidget, QVBoxLayout, QWidget)

from app.attachments import image_refusal
from app.chat_controller import ChatController
from app.i18n import tr
from app.settings import Settings, save_settings
from app.store import Message
from app.theme import apply_theme
from app.widgets.chat_view import ChatView
from app.widgets.composer import Composer
from app.widgets.sidebar import Sidebar
from app.widgets.status_widgets import Banner, ContextMeter


class MainWindow(QMainWindow):
    def __init__(self, controller: ChatController, settings: Settings, telemetry=None, dark: bool = False) -> None:
        super().__init__()
        self.controller = controller
        self.settings = settings
        self.telemetry = telemetry
        self.editing_message_id: int | None = None
        self._pending_stream: Message | None = None
        self._stream_timer = QTimer(self)
        self._stream_timer.setSingleShot(True)
        self._stream_timer.setInterval(40)
        self._stream_timer.timeout.connect(self._flush_stream)
        self._stats_timer = QTimer(self)      # the worker reports its own process stats to the dashboard
        self._stats_timer.setInterval(2000)
        self._stats_timer.timeout.connect(self.controller.client.request_stats)
        self._stats_timer.start()
        self.setWindowTitle("Monorail")
        self.setAcceptDrops(True)
        self.resize(1280, 820)

        self.sidebar = Sidebar()
        self.banner = Banner()
        self.model_label = QLabel(tr("No model"))
        self.model_label.setObjectName("modelLabel")
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 1000)
        self.load_bar.setFixedWidth(200)
        self.load_bar.hide()
        self.load_label = QLabel()
        self.context_meter = ContextMeter()
        self.chat = ChatView()
        self.chat.set_dark(dark)
        self.composer = Composer()
        self.composer.edit.enter_sends = settings.enter_sends
        self.composer.thinking_box.setChecked(settings.thinking_default)

        header = QHBoxLayout()
        header.addWidget(self.model_label)
        header.addWidget(self.load_bar)
        header.addWidget(self.load_label)
        header.addStretch(1)
        header.addWidget(self.context_meter)
        chat_page = QWidget()
        col = QVBoxLayout(chat_page)
        col.setContentsMargins(6, 6, 6, 6)
        col.addWidget(self.banner)
        col.addLayout(header)
        col.addWidget(self.chat, 1)
        col.addWidget(self.composer)

        self.tabs = QTabWidget()
        self.tabs.addTab(chat_page, tr("Chat"))
        self.dashboard = None
        if telemetry is not None:
            from app.widgets.dashboard import Dashboard
            self.dashboard = Dashboard(telemetry, settings)
            self.tabs.addTab(self.dashboard, tr("Dashboard"))

        split = QSplitter()
        split.addWidget(self.sidebar)
        split.addWidget(self.tabs)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 1020])
        self.setCentralWidget(split)
        self._build_menu()
        self._connect()
        self.refresh_conversations()
        controller.announce_startup()

    # -- wiring ---------------------------------------------------------------------------------
    def _build_menu(self) -> None:
        m = self.menuBar().addMenu(tr("&File"))
        for text, shortcut, slot in ((tr("New chat"), "Ctrl+N", self.controller.new_conversation),
                                     (tr("Search chats"), "Ctrl+K", self.sidebar.focus_search),
                                     (tr("Settings…"), "Ctrl+,", self.open_settings),
                                     (tr("Reload model"), "Ctrl+R", self.controller.load_model),
                                     (tr("Unload model (free GPU memory)"), "", self.controller.unload_model),
                                     (tr("Quit"), "Ctrl+Q", self.close)):
            act = QAction(text, self)
            if shortcut:
                act.setShortcut(QKeySequence(shortcut))
            act.triggered.connect(slot)
            m.addAction(act)
        self.addActions(m.actions())   # shortcuts work even with the menu bar hidden

    def _connect(self) -> None:
        c = self.controller
        c.conversations_changed.connect(self.refresh_conversations)
        c.conversation_opened.connect(self._show_conversation)
        c.message_updated.connect(self._message_updated)
        c.busy_changed.connect(self._busy_changed)
        c.banner.connect(self._banner)
        c.model_changed.connect(self._model_changed)
        c.load_progress.connect(self._load_progress)
        c.context_changed.connect(self.context_meter.set_usage)
        self.banner.action_triggered.connect(self._banner_action)
        self.sidebar.new_requested.connect(c.new_conversation)
        self.sidebar.selected.connect(c.open_conversation)
        self.sidebar.search_changed.connect(lambda _q: self.refresh_conversations())
        self.sidebar.rename_requested.connect(c.rename_conversation)
        self.sidebar.delete_requested.connect(self._confirm_delete)
        self.sidebar.export_requested.connect(self.export_conversation)
        self.composer.send_requested.connect(self.send)
        self.composer.stop_requested.connect(c.stop)
        self.composer.message.connect(lambda text: self._banner("warning", text, "", ""))
        self.composer.text_changed.connect(self._draft_changed)
        self.composer.attachments_changed.connect(self._draft_changed)
        self.chat.copy_requested.connect(self.copy_message)
        self.chat.edit_requested.connect(self.begin_edit)
        self.chat.regenerate_requested.connect(self.regenerate)
        if self.telemetry is not None:
            c.reply_started.connect(self.telemetry.reply_started)
            c.reply_finished.connect(self._reply_finished)
            c.worker_event.connect(self.telemetry.engine_event)

    # -- chat actions ---------------------------------------------------------------------------
    def send(self, text: str, attachments: list) -> None:
        thinking = self.composer.thinking_box.isChecked()
        if self.editing_message_id is not None:
            reason = self.controller.edit_and_resend(self.editing_message_id, text, attachments, thinking)
        else:
            reason = self.controller.send(text, attachments, thinking)
        if reason:
            self._refused(reason)
            return
        self.editing_message_id = None
        self.composer.clear()

    def regenerate(self, message_id: int) -> None:
        reason = self.controller.regenerate(message_id, self.composer.thinking_box.isChecked())
        if reason:
            self._refused(reason)

    def _refused(self, reason: str) -> None:
        """A send the controller refused. With the engine down, the banner keeps its Restart button (the reason
        says to restart from the banner; a plain warning would have replaced the crash banner's button)."""
        if not self.controller.client.alive:
            self._banner("error", reason, "restart", tr("Restart engine"))
        else:
            self._banner("warning", reason, "", "")

    def begin_edit(self, message_id: int) -> None:
        m = next((m for m in self.controller.messages() if m.id == message_id), None)
        if m is None:
            return
        self.editing_message_id = message_id
        self.composer.clear()
        self.composer.set_text(m.content)
        for att in m.attachments:
            self.composer.add_attachment(att)
        self.composer.set_editing(tr("Editing a message: sending replaces it and everything after it (Esc cancels)."))
        self.composer.edit.setFocus()

    def copy_message(self, message_id: int) -> None:
        m = next((m for m in self.controller.messages() if m.id == message_id), None)
        if m is not None:
            QGuiApplication.clipboard().setText(m.content)

    # Images dropped anywhere on the window (the chat, the sidebar) go to the composer.
    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self.composer.dragEnterEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self.composer.dropEvent(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        # Esc reaches here from the composer and the chat, which leave it unhandled.
        if event.key() == Qt.Key.Key_Escape:
            self._escape()
            return
        super().keyPressEvent(event)

    def _escape(self) -> None:
        if self.controller.busy:
            self.controller.stop()
        elif self.editing_message_id is not None:
            self.editing_message_id = None
            self.composer.clear()

    def _draft_changed(self) -> None:
        self.controller.set_draft(self.composer.text(), self.composer.attachments)

    # -- controller -> view -------------------------------------------------------------------------
    def refresh_conversations(self) -> None:
        convs = self.controller.store.conversations(self.sidebar.search.text())
        self.sidebar.set_conversations(convs, self.controller.conversation_id)

    def _show_conversation(self, conversation_id: int) -> None:
        self.editing_message_id = None
        self.composer.set_editing("")
        self.chat.show_messages(self.controller.messages(), self.controller.busy)
        self.refresh_conversations()

    def _message_updated(self, m: Message) -> None:
        if m.conversation_id != self.controller.conversation_id:
            return
        if m.status == "streaming" and m.id in self.chat.widgets:
            # Re-rendering Markdown per token is wasted work: coalesce stream updates to ~25 per second.
            self._pending_stream = m
            if not self._stream_timer.isActive():
                self._stream_timer.start()
            return
        self._stream_timer.stop()
        self._pending_stream = None
        self.chat.update_message(m)

    def _flush_stream(self) -> None:
        if self._pending_stream is not None:
            self.chat.update_message(self._pending_stream)
            self._pending_stream = None

    def _busy_changed(self, busy: bool) -> None:
        self.composer.set_busy(busy)
        self.chat.set_busy(busy)

    def _banner(self, kind: str, text: str, action: str, label: str) -> None:
        self.banner.show_message(kind, text, action, label)

    def _banner_action(self, action: str) -> None:
        if action == "restart":
            self.banner.hide()
            self.controller.restart_worker()
        elif action == "settings":
            self.open_settings()

    def tell_at_start(self, notes: list[str]) -> QMessageBox:
        """Once, at start: what the app could not read and kept or reset (app.main.start_notes)."""
        box = QMessageBox(QMessageBox.Icon.Warning, tr("Monorail"), "\n\n".join(notes),
                          QMessageBox.StandardButton.Ok, self)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.start_notice = box
        box.open()
        return box

    def _model_changed(self, info) -> None:
        if info is None:
            self.model_label.setText(tr("No model loaded"))
            self.model_label.setToolTip("")
            self.composer.set_image_refusal(None)  # not known until a model loads: images may wait in the composer
            return
        name = info.name + (" " + tr("(random weights)") if info.random_weights else "")
        self.model_label.setText(f"<b>{name}</b> · {info.backend}")
        self.model_label.setToolTip(getattr(info, "backend_note", ""))   # why, when Settings asked for "auto"
        self.composer.set_image_refusal(image_refusal(info))
        if self.banner.kind == "info":
            self.banner.hide()

    def _load_progress(self, fraction: float, message: str) -> None:
        done = fraction >= 1.0 and not message
        self.load_bar.setVisible(not done)
        self.load_label.setVisible(not done)
        self.load_bar.setValue(int(fraction * 1000))
        self.load_label.setText(message)

    def _reply_finished(self, message: Message, finished) -> None:
        energy = self.telemetry.reply_finished(message.completion_tokens or 0)
        if energy is not None:
            message.energy_j = energy
            self.controller.store.update_message(message.id, energy_j=energy)
            self._message_updated(message)

    # -- dialogs ---------------------------------------------------------------------------------
    def _confirm_delete(self, conversation_id: int) -> None:
        conv = self.controller.store.conversation(conversation_id)
        answer = QMessageBox.question(self, tr("Delete chat"),
                                      tr("Delete “{title}” and all its messages?").format(title=conv.title if conv else ""))
        if answer == QMessageBox.StandardButton.Yes:
            self.controller.delete_conversation(conversation_id)

    def export_conversation(self, conversation_id: int, fmt: str, path: str | None = None) -> None:
        conv = self.controller.store.conversation(conversation_id)
        if conv is None:
            return
        if path is None:
            suggested = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in conv.title)[:50] or "chat"
            path, _ = QFileDialog.getSaveFileName(self, tr("Export chat"), f"{suggested}.{fmt}",
                                                  "Markdown (*.md)" if fmt == "md" else "JSON (*.json)")
            if not path:
                return
        store = self.controller.store
        text = store.export_markdown(conversation_id) if fmt == "md" else store.export_json(conversation_id)
        Path(path).write_text(text, encoding="utf-8")

    def open_settings(self) -> None:
        from app.widgets.settings_dialog import SettingsDialog
        dialog = SettingsDialog(self.settings, self.controller, self)
        if dialog.exec():
            self.apply_settings(dialog.result_settings(), dialog.needs_reload())

    def apply_settings(self, new: Settings, reload_model: bool) -> None:
        self.settings.__dict__.update(new.__dict__)
        save_settings(self.settings)
        self.composer.edit.enter_sends = self.settings.enter_sends
        self.composer.thinking_box.setChecked(self.settings.thinking_default)
        dark = apply_theme(QGuiApplication.instance(), self.settings.theme)
        self.chat.set_dark(dark)
        if self.dashboard is not None:
            self.dashboard.set_dark(dark)
        if reload_model:
            if self.controller.busy:
                self.controller.stop()
            QTimer.singleShot(0, self.controller.load_model)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self.hide()   # gone at once, while the worker saves the conversation's state and exits
        self.controller.shutdown()
        if self.telemetry is not None:
            self.telemetry.stop()
        super().closeEvent(event)
