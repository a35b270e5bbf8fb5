"""One chat message on screen: role, images, collapsible thinking, Markdown body, stats, actions."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QGuiApplication, QPixmap
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QTextBrowser, QToolButton,
                               QVBoxLayout, QWidget)

from app.attachments import thumbnail
from app.i18n import tr
from app.markdown_render import COPY_SCHEME, MarkdownRenderer, plain_html
from app.store import Message


class AutoHeightBrowser(QTextBrowser):
    """A read-only rich-text view as tall as its content (the chat scrolls, not each message)."""

    copied = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self.document().contentsChanged.connect(self._fit)
        self.anchorClicked.connect(self._on_anchor)
        self.code_blocks: list[str] = []

    def _fit(self) -> None:
        self.document().setTextWidth(self.viewport().width())
        h = int(self.document().size().height()) + 6
        if h != self.height():
            self.setFixedHeight(h)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._fit()

    def sizeHint(self) -> QSize:
        return QSize(400, self.height())

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            n = int(url.path() or 0)
            if 0 <= n < len(self.code_blocks):
                QGuiApplication.clipboard().setText(self.code_blocks[n])
                self.copied.emit(self.code_blocks[n])
        elif url.scheme() in ("http", "https"):
            from PySide6.QtGui import QDesktopServices
            QDesktopServices.openUrl(url)


def format_stats(m: Message) -> str:
    parts = []
    if m.prompt_tokens is not None:
        if m.cached_tokens:   # the previous turn's state was resumed: only the rest was prefilled
            parts.append(tr("{n} prompt tokens ({c} resumed)").format(n=m.prompt_tokens, c=m.cached_tokens))
        else:
            parts.append(tr("{n} prompt tokens").format(n=m.prompt_tokens))
    if m.completion_tokens is not None:
        parts.append(tr("{n} output tokens").format(n=m.completion_tokens))
    if m.ttft_s is not None:
        parts.append(tr("TTFT {s:.2f} s").format(s=m.ttft_s))
    if m.decode_tok_s:
        parts.append(tr("{r:.1f} tok/s").format(r=m.decode_tok_s))
    if m.spec_accept_rate is not None:
        parts.append(tr("acceptance {p:.0f}%").format(p=100 * m.spec_accept_rate))
    if m.energy_j is not None and m.completion_tokens:
        parts.append(tr("{j:.2f} J/token").format(j=m.energy_j / m.completion_tokens))
    return " · ".join(parts)


STATUS_TEXT = {"cancelled": "Stopped", "error": "Failed", "interrupted": "Interrupted (the app or engine stopped)"}


class MessageWidget(QFrame):
    copy_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)

    def __init__(self, message: Message, renderer: MarkdownRenderer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = message
        self.renderer = renderer
        self.setObjectName("userMessage" if message.role == "user" else "assistantMessage")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        lay.setSpacing(4)

        self.role_label = QLabel()
        self.role_label.setObjectName("roleLabel")
        lay.addWidget(self.role_label)

        self.images_row = QHBoxLayout()
        self.images_row.setSpacing(6)
        self.images_row.addStretch(1)
        lay.addLayout(self.images_row)
        self._shown_images = 0

        self.thinking_toggle = QToolButton()
        self.thinking_toggle.setObjectName("thinkingToggle")
        self.thinking_toggle.setCheckable(True)
        self.thinking_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.thinking_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.thinking_toggle.toggled.connect(self._toggle_thinking)
        self.thinking_view = AutoHeightBrowser()
        self.thinking_view.setObjectName("thinkingView")
        self.thinking_view.setVisible(False)
        lay.addWidget(self.thinking_toggle)
        lay.addWidget(self.thinking_view)

        self.body = AutoHeightBrowser()
        self.body.setObjectName("messageBody")
        lay.addWidget(self.body)

        self.status_label = QLabel()
        self.status_label.setObjectName("statusLabel")
        self.status_label.setWordWrap(True)
        lay.addWidget(self.status_label)

        row = QHBoxLayout()
        self.stats_label = QLabel()
        self.stats_label.setObjectName("statsLabel")
        row.addWidget(self.stats_label, 1)
        self.copy_button = self._action(row, tr("Copy"), self.copy_requested)
        self.edit_button = self._action(row, tr("Edit"), self.edit_requested)
        self.regenerate_button = self._action(row, tr("Regenerate"), self.regenerate_requested)
        lay.addLayout(row)
        self._thinking_user_choice: bool | None = None
        self.set_message(message)

    def _action(self, row: QHBoxLayout, text: str, signal) -> QPushButton:
        b = QPushButton(text)
        b.setFlat(True)
        b.setCursor(Qt.CursorShape.PointingHandCursor)
        b.clicked.connect(lambda: signal.emit(self.message.id))
        row.addWidget(b)
        return b

    def _toggle_thinking(self, on: bool) -> None:
        self._thinking_user_choice = on
        self.thinking_toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.thinking_view.setVisible(on)

    def set_last(self, is_last_assistant: bool, busy: bool) -> None:
        self.regenerate_button.setVisible(self.message.role == "assistant" and is_last_assistant and not busy)
        self.edit_button.setVisible(self.message.role == "user" and not busy)

    def set_message(self, m: Message) -> None:
        self.message = m
        streaming = m.status == "streaming"
        self.role_label.setText(tr("You") if m.role == "user" else (m.model or tr("Assistant")))
        for att in m.attachments[self._shown_images:]:
            lbl = QLabel()
            lbl.setObjectName("messageImage")
            lbl.setPixmap(QPixmap.fromImage(thumbnail(att, 160)))
            lbl.setToolTip(f"{att.name} ({att.width}x{att.height})")
            self.images_row.insertWidget(self.images_row.count() - 1, lbl)
        self._shown_images = len(m.attachments)

        has_thinking = bool(m.reasoning)
        self.thinking_toggle.setVisible(has_thinking)
        if has_thinking:
            secs = m.thinking_seconds or 0.0
            still = streaming and m.reasoning_ended_at is None
            label = tr("Thinking… {s:.1f} s") if still else tr("Thought for {s:.1f} s")
            self.thinking_toggle.setText(label.format(s=secs))
            # open while thinking streams, collapse once the answer starts (unless the user chose)
            if self._thinking_user_choice is None:
                self.thinking_toggle.blockSignals(True)
                self.thinking_toggle.setChecked(still)
                self.thinking_toggle.blockSignals(False)
                self.thinking_toggle.setArrowType(Qt.ArrowType.DownArrow if still else Qt.ArrowType.RightArrow)
                self.thinking_view.setVisible(still)
            self.thinking_view.setHtml(plain_html(m.reasoning))

        if m.role == "user":
            self.body.setHtml(plain_html(m.content))
            self.body.code_blocks = []
        else:
            r = self.renderer.render(m.content + (" ▍" if streaming and not still_thinking(m) else ""))
            self.body.setHtml(r.html)
            self.body.code_blocks = r.code_blocks
        self.body.setVisible(bool(m.content) or m.role == "user" or (streaming and not m.reasoning))

        status = tr(STATUS_TEXT[m.status]) if m.status in STATUS_TEXT else ""
        if m.error:
            status = f"{status}: {m.error}" if status else m.error
        self.status_label.setText(status)
        self.status_label.setVisible(bool(status))
        self.stats_label.setText(format_stats(m) if m.role == "assistant" else "")
        self.copy_button.setVisible(not streaming)


def still_thinking(m: Message) -> bool:
    return m.status == "streaming" and bool(m.reasoning) and m.reasoning_ended_at is None and not m.content

