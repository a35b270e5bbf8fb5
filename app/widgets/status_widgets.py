"""Small status widgets: the banner above the chat and the context meter."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar,
                               QPushButton, QVBoxLayout, QWidget)

from app.i18n import tr


class Banner(QFrame):
    """A short message with an optional action (e.g. "Restart engine"); kinds: info, warning, error.

    A message of several paragraphs (an engine error with the memory plan's table under its first sentence)
    shows its first paragraph; "Details…" opens the whole text in a fixed-width window."""

    action_triggered = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        self.button = QPushButton()
        self.button.clicked.connect(lambda: self.action_triggered.emit(self._action))
        lay.addWidget(self.button)
        self.details_button = QPushButton(tr("Details…"))
        self.details_button.setFlat(True)
        self.details_button.clicked.connect(self.show_details)
        lay.addWidget(self.details_button)
        self.close_button = QPushButton("✕")
        self.close_button.setFlat(True)
        self.close_button.setFixedWidth(28)
        self.close_button.clicked.connect(self.hide)
        lay.addWidget(self.close_button)
        self._action = ""
        self.kind = ""
        self.details = ""
        self.details_dialog: QDialog | None = None
        self.hide()

    def show_message(self, kind: str, text: str, action: str = "", action_label: str = "") -> None:
        self.kind = kind
        self.setProperty("kind", kind)
        self.style().unpolish(self)
        self.style().polish(self)
        head, sep, _ = text.strip().partition("\n\n")
        self.details = text.strip() if sep else ""
        self.label.setText(head)
        self.details_button.setVisible(bool(self.details))
        self._action = action
        self.button.setText(action_label)
        self.button.setVisible(bool(action))
        self.show()


    def show_details(self) -> None:
        dialog = QDialog(self.window())
        dialog.setWindowTitle(tr("Details"))
        lay = QVBoxLayout(dialog)
        text = QPlainTextEdit(self.details)
        text.setReadOnly(True)
        text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        lay.addWidget(text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.reject)
        lay.addWidget(buttons)
        dialog.resize(760, 520)
        self.details_dialog = dialog
        dialog.open()


class ContextMeter(QWidget):
    """Tokens used of the context limit; turns to a warning from ``warn_fraction`` on."""

    def __init__(self, warn_fraction: float = 0.85, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.warn_fraction = warn_fraction
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.bar = QProgressBar()
        self.bar.setObjectName("contextBar")
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(120)
        self.bar.setFixedHeight(8)
        self.label = QLabel()
        self.label.setObjectName("contextLabel")
        lay.addWidget(self.label)
        lay.addWidget(self.bar)
        self.used = 0
        self.limit = 0
        self.warning = False
        self.set_usage(0, 0)

    def set_usage(self, used: int, limit: int) -> None:
        self.used, self.limit = used, limit
        if limit <= 0:
            self.bar.setRange(0, 1)
            self.bar.setValue(0)
            self.label.setText(tr("{used:,} tokens (limit unknown)").format(used=used))
            self.warning = False
        else:
            self.bar.setRange(0, limit)
            self.bar.setValue(min(used, limit))
            self.warning = used >= self.warn_fraction * limit
            text = tr("{used:,} / {limit:,} tokens").format(used=used, limit=limit)
            if used >= limit:
                text += " — " + tr("context full: start a new conversation")
            elif self.warning:
                text += " — " + tr("context nearly full")
            self.label.setText(text)
        self.bar.setProperty("warning", self.warning)
        self.label.setProperty("warning", self.warning)
        for w in (self.bar, self.label):
            w.style().unpolish(w)
            w.style().polish(w)
