"""The message composer: multi-line text, image attachments (drop, paste, picker), send / stop."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QImage, QKeyEvent, QPixmap
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QToolButton, QVBoxLayout, QWidget)

from app.attachments import (FILE_DIALOG_FILTER, AttachmentError, attachment_from_file, attachment_from_qimage,
                             check_count, thumbnail)
from app.i18n import tr
from app.store import Attachment


def _image_sources(mime: QMimeData) -> list:
    """Local image files first (they keep their names), else raw image data."""
    files = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()] if mime.hasUrls() else []
    if files:
        return files
    if mime.hasImage():
        img = mime.imageData()
        return [img if isinstance(img, QImage) else QImage(img)]
    return []


class ComposerEdit(QPlainTextEdit):
    """Enter sends and Shift+Enter breaks the line (or, with ``enter_sends`` off, Ctrl+Enter sends)."""

    send = Signal()
    images_pasted = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.enter_sends = True
        self.setPlaceholderText(tr("Message Monorail… (Enter sends, Shift+Enter new line; drop or paste images)"))
        self.setFixedHeight(84)

    def keyPressEvent(self, e: QKeyEvent) -> None:  # noqa: N802 (Qt override)
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = e.modifiers()
            ctrl = bool(mods & Qt.KeyboardModifier.ControlModifier)
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            if (self.enter_sends and not shift) or (not self.enter_sends and ctrl):
                self.send.emit()
                return
            self.insertPlainText("\n")
            return
        super().keyPressEvent(e)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802
        return bool(_image_sources(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802
        images = _image_sources(source)
        if images:   # the composer validates each one and says why it refuses a file
            self.images_pasted.emit(images)
            return
        super().insertFromMimeData(source)


class AttachmentChip(QFrame):
    removed = Signal(object)

    def __init__(self, att: Attachment, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachment = att
        self.setObjectName("attachmentChip")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        top = QHBoxLayout()
        top.addStretch(1)
        self.remove_button = QToolButton()
        self.remove_button.setText("✕")
        self.remove_button.setToolTip(tr("Remove {name}").format(name=att.name))
        self.remove_button.clicked.connect(lambda: self.removed.emit(self))
        top.addWidget(self.remove_button)
        lay.addLayout(top)
        pic = QLabel()
        pic.setPixmap(QPixmap.fromImage(thumbnail(att, 56)))
        pic.setToolTip(f"{att.name} — {att.width}x{att.height}")
        lay.addWidget(pic, alignment=Qt.AlignmentFlag.AlignCenter)


class Composer(QFrame):
    send_requested = Signal(str, list)       # text, attachments
    stop_requested = Signal()
    attachments_changed = Signal()
    text_changed = Signal()
    message = Signal(str)                    # user-facing refusal (bad image, no vision)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.setAcceptDrops(True)
        self.image_refusal: str | None = None  # set_image_refusal: unknown until a model loads
        self.busy = False
        self.attachments: list[Attachment] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 6)

        self.strip = QHBoxLayout()
        self.strip.addStretch(1)
        self.strip_holder = QWidget()
        self.strip_holder.setLayout(self.strip)
        self.strip_holder.hide()
        lay.addWidget(self.strip_holder)

        self.edit_note = QLabel()
        self.edit_note.setObjectName("editNote")
        self.edit_note.hide()
        lay.addWidget(self.edit_note)

        self.edit = ComposerEdit()
        self.edit.send.connect(self._send)
        self.edit.images_pasted.connect(self.add_images)
        self.edit.textChanged.connect(self.text_changed)
        lay.addWidget(self.edit)

        row = QHBoxLayout()
        self.attach_button = QPushButton(tr("Attach image…"))
        self.attach_button.clicked.connect(self.pick_files)
        row.addWidget(self.attach_button)
        self.thinking_box = QCheckBox(tr("Thinking"))
        self.thinking_box.setChecked(True)
        row.addWidget(self.thinking_box)
        row.addStretch(1)
        self.send_button = QPushButton(tr("Send"))
        self.send_button.setObjectName("sendButton")
        self.send_button.clicked.connect(self._send)
        row.addWidget(self.send_button)
        self.stop_button = QPushButton(tr("Stop"))
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip(tr("Stop generating (Esc)"))
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.hide()
        row.addWidget(self.stop_button)
        lay.addLayout(row)

    # -- state ----------------------------------------------------------------------
    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)

    def set_image_refusal(self, refusal: str | None) -> None:
        """"": the loaded model reads images; a sentence: why it cannot (app.attachments.image_refusal). None: no
        model loaded (yet): images are accepted and wait here, since a drop during a long load is the common case;
        sending checks the model then."""
        self.image_refusal = refusal
        self.attach_button.setEnabled(not refusal)
        self.attach_button.setToolTip(refusal or "")

    def set_editing(self, note: str) -> None:
        self.edit_note.setText(note)
        self.edit_note.setVisible(bool(note))

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)

    def clear(self) -> None:
        self.edit.clear()
        for chip in self._chips():
            chip.setParent(None)
            chip.deleteLater()
        self.attachments = []
        self.strip_holder.hide()
        self.set_editing("")
        self.attachments_changed.emit()

    # -- attachments ------------------------------------------------------------------
    def _chips(self) -> list[AttachmentChip]:
        return [self.strip.itemAt(i).widget() for i in range(self.strip.count())
                if isinstance(self.strip.itemAt(i).widget(), AttachmentChip)]

    def add_attachment(self, att: Attachment) -> None:
        chip = AttachmentChip(att)
        chip.removed.connect(self.remove_chip)
        self.strip.insertWidget(self.strip.count() - 1, chip)
        self.attachments.append(att)
        self.strip_holder.show()
        self.attachments_changed.emit()

    def remove_chip(self, chip: AttachmentChip) -> None:
        self.attachments.remove(chip.attachment)
        chip.setParent(None)
        chip.deleteLater()
        self.strip_holder.setVisible(bool(self.attachments))
        self.attachments_changed.emit()

    def add_images(self, sources: list) -> None:
        """Files (paths) or QImages; each is validated, refusals are reported, the rest attached."""
        if self.image_refusal:
            self.message.emit(self.image_refusal)
            return
        for src in sources:
            try:
                check_count(len(self.attachments))
                att = attachment_from_file(src) if isinstance(src, str) else attachment_from_qimage(src)
            except AttachmentError as exc:
                self.message.emit(str(exc))
                continue
            self.add_attachment(att)

    def pick_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, tr("Attach images"), "", FILE_DIALOG_FILTER)
        if files:
            self.add_images(files)

    def dragEnterEvent(self, e) -> None:  # noqa: N802 (Qt override)
        if _image_sources(e.mimeData()):
            e.acceptProposedAction()

    def dropEvent(self, e) -> None:  # noqa: N802
        sources = _image_sources(e.mimeData())
        if sources:
            e.acceptProposedAction()
            self.add_images(sources)

    # -- sending -----------------------------------------------------------------------
    def _send(self) -> None:
        if self.busy:
            return
        text = self.text().strip()
        if not text and not self.attachments:
            return
        self.send_requested.emit(text, list(self.attachments))
