"""The scrolling list of messages of one conversation."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from app.i18n import tr
from app.markdown_render import MarkdownRenderer
from app.store import Message
from app.widgets.message_view import MessageWidget


class ChatView(QScrollArea):
    copy_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.renderer = MarkdownRenderer(copy_label=tr("Copy"))
        inner = QWidget()
        inner.setObjectName("chatInner")
        self._layout = QVBoxLayout(inner)
        self._layout.setContentsMargins(12, 12, 12, 12)
        self._layout.setSpacing(10)
        self.empty_label = QLabel(tr("Start a conversation: type below, or drop an image."))
        self.empty_label.setObjectName("emptyLabel")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._layout.addWidget(self.empty_label)
        self._layout.addStretch(1)
        self.setWidget(inner)
        self.widgets: dict[int, MessageWidget] = {}
        self._busy = False
        self._follow = True
        self.verticalScrollBar().rangeChanged.connect(self._scroll_if_following)
        self.verticalScrollBar().valueChanged.connect(self._track_follow)

    def set_dark(self, dark: bool) -> None:
        self.renderer = MarkdownRenderer(dark=dark, copy_label=tr("Copy"))
        for w in self.widgets.values():
            w.renderer = self.renderer
            w.set_message(w.message)

    def _track_follow(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 40

    def _scroll_if_following(self, _lo: int, hi: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(hi)

    def show_messages(self, messages: list[Message], busy: bool = False) -> None:
        for w in self.widgets.values():
            w.setParent(None)
            w.deleteLater()
        self.widgets.clear()
        for m in messages:
            if m.role != "system":
                self._add(m)
        self._follow = True
        self.set_busy(busy)
        QTimer.singleShot(0, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum()))

    def _add(self, m: Message) -> MessageWidget:
        w = MessageWidget(m, self.renderer)
        w.copy_requested.connect(self.copy_requested)
        w.edit_requested.connect(self.edit_requested)
        w.regenerate_requested.connect(self.regenerate_requested)
        self._layout.insertWidget(self._layout.count() - 1, w)
        self.widgets[m.id] = w
        return w

    def update_message(self, m: Message) -> None:
        w = self.widgets.get(m.id)
        if w is None:
            w = self._add(m)
            self._refresh_actions()
        w.set_message(m)
        self.empty_label.setVisible(not self.widgets)

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self._refresh_actions()

    def _refresh_actions(self) -> None:
        self.empty_label.setVisible(not self.widgets)
        last_assistant = max((i for i, w in self.widgets.items() if w.message.role == "assistant"), default=None)
        for i, w in self.widgets.items():
            w.set_last(i == last_assistant, self._busy)
