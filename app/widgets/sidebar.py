"""The conversation list: search (titles and text), new, rename, delete, export."""

from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QInputDialog, QLineEdit, QListWidget, QListWidgetItem, QMenu, QPushButton,
                               QVBoxLayout, QWidget)

from app.i18n import tr
from app.store import Conversation


class Sidebar(QWidget):
    new_requested = Signal()
    selected = Signal(int)
    search_changed = Signal(str)
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    export_requested = Signal(int, str)     # conversation id, "md" | "json"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        top = QHBoxLayout()
        self.new_button = QPushButton(tr("New chat"))
        self.new_button.setToolTip("Ctrl+N")
        self.new_button.clicked.connect(self.new_requested)
        top.addWidget(self.new_button)
        lay.addLayout(top)
        self.search = QLineEdit()
        self.search.setPlaceholderText(tr("Search chats (Ctrl+K)"))
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.search_changed)
        lay.addWidget(self.search)
        self.list = QListWidget()
        self.list.setObjectName("conversationList")
        # long titles end in an ellipsis (the tooltip has the whole title) instead of a horizontal scroll bar
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._current_changed)
        lay.addWidget(self.list, 1)
        self._quiet = False

    def set_conversations(self, conversations: list[Conversation], current: int | None) -> None:
        self._quiet = True
        self.list.clear()
        for c in conversations:
            when = datetime.fromtimestamp(c.updated_at).strftime("%Y-%m-%d %H:%M")
            item = QListWidgetItem(f"{c.title or tr('Untitled')}\n{when}")
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            item.setToolTip(c.title)
            self.list.addItem(item)
            if c.id == current:
                self.list.setCurrentItem(item)
        self._quiet = False

    def ids(self) -> list[int]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())]

    def _current_changed(self, item: QListWidgetItem | None, _prev) -> None:
        if item is not None and not self._quiet:
            self.selected.emit(item.data(Qt.ItemDataRole.UserRole))

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        cid = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        menu.addAction(tr("Rename…"), lambda: self.ask_rename(cid, item.toolTip()))
        menu.addAction(tr("Export as Markdown…"), lambda: self.export_requested.emit(cid, "md"))
        menu.addAction(tr("Export as JSON…"), lambda: self.export_requested.emit(cid, "json"))
        menu.addSeparator()
        menu.addAction(tr("Delete"), lambda: self.delete_requested.emit(cid))
        menu.exec(self.list.mapToGlobal(pos))

    def ask_rename(self, cid: int, current: str) -> None:
        title, ok = QInputDialog.getText(self, tr("Rename chat"), tr("Title:"), text=current)
        if ok and title.strip():
            self.rename_requested.emit(cid, title.strip())
