"""The conversation history: past conversations, reopened and exported.

Reads the SQLite history the engine writes every finished turn to (``engine.history``).
Reading is a few milliseconds of SQLite per click, so it runs where it is asked for; the
dialog opens its own read connection and closes it with itself.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QFileDialog, QHBoxLayout, QLabel, QListWidget,
                               QListWidgetItem, QPushButton, QSplitter, QTextBrowser,
                               QVBoxLayout, QWidget)

from engine.errors import ParleyError
from engine.history import HistoryStore


class HistoryDialog(QDialog):
    """Conversations newest first; the selected one shown in full; Markdown/JSON export."""

    def __init__(self, path: str | Path | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Conversation history")
        self.resize(900, 600)
        self.store = HistoryStore(path)
        self.list = QListWidget()
        self.list.setAccessibleName("Past conversations")
        self.view = QTextBrowser()
        self.view.setAccessibleName("The selected conversation")
        self.status = QLabel(self.store.notice or "")
        self.status.setWordWrap(True)
        self.export_md = QPushButton("Export Markdown…")
        self.export_json = QPushButton("Export JSON…")
        for button, fmt in ((self.export_md, "md"), (self.export_json, "json")):
            button.setAccessibleName(button.text().rstrip("…"))
            button.clicked.connect(lambda _checked=False, f=fmt: self._export(f))
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.list)
        split.addWidget(self.view)
        split.setSizes([300, 600])
        buttons = QHBoxLayout()
        buttons.addWidget(self.status, 1)
        for button in (self.export_md, self.export_json, close):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(split, 1)
        layout.addLayout(buttons)
        self.list.currentItemChanged.connect(self._show)
        self.reload()

    def reload(self) -> None:
        """List the stored conversations, newest first, and select the newest."""
        self.list.clear()
        for summary in self.store.conversations(limit=500):
            item = QListWidgetItem(f"{summary.started_at[:16].replace('T', ' ')}  ·  "
                                   f"{summary.title or '(no words)'}  ({summary.turns} turns)")
            item.setData(Qt.ItemDataRole.UserRole, summary.id)
            self.list.addItem(item)
        has_any = self.list.count() > 0
        self.export_md.setEnabled(has_any)
        self.export_json.setEnabled(has_any)
        if has_any:
            self.list.setCurrentRow(0)
        else:
            self.view.setPlainText("No conversation stored yet.")

    def selected_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else int(item.data(Qt.ItemDataRole.UserRole))

    def _show(self, *_items) -> None:
        conversation_id = self.selected_id()
        if conversation_id is not None:
            self.view.setMarkdown(self.store.export(conversation_id, "md"))

    def export_to(self, path: str | Path, fmt: str) -> Path:
        """Write the selected conversation to ``path`` as Markdown or JSON."""
        conversation_id = self.selected_id()
        if conversation_id is None:
            raise ParleyError("no conversation is selected")
        path = Path(path)
        path.write_text(self.store.export(conversation_id, fmt), encoding="utf-8")
        return path

    def _export(self, fmt: str) -> None:
        suffix = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}[fmt]
        name, _ = QFileDialog.getSaveFileName(self, "Export conversation",
                                              f"conversation.{fmt}", suffix)
        if not name:
            return
        try:
            self.status.setText(f"exported to {self.export_to(name, fmt)}")
        except (OSError, ParleyError) as exc:
            self.status.setText(f"could not export: {exc}")

    def done(self, result: int) -> None:
        self.store.close()
        super().done(result)
