"""The conversation history browser: past conversations by day, full-text search, copy,
export and delete.

Reads the SQLite history the engine writes every finished turn to (``engine.history.store``).
Listing and showing a conversation is a few milliseconds of SQLite per click, so it runs
where it is asked for; a search can scan a large full-text index as the user types, so it
runs on a latest-wins lane (``app.core.background``) and only the newest query's answer
is shown. The dialog opens its own read connection and, on close, joins the lane before
closing the connection.
"""

from __future__ import annotations

import itertools
from datetime import date, datetime
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (QComboBox, QDialog, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QPushButton, QSplitter, QTextBrowser, QTextEdit,
                               QVBoxLayout, QWidget)

from app.core.background import JobKind, LatestLane
from app.core.widgets import confirm
from engine.errors import ParleyError
from engine.history.store import ConversationSummary, HistoryStore, SearchHit

_ROLE = Qt.ItemDataRole.UserRole
_MARKS = ("«", "»")  # around matched words in a hit's snippet: plain text, any theme
SEARCH_DELAY_MS = 250  # typing pauses this long before a search runs
LIST_LIMIT = 500


def search_query(text: str) -> str:
    """The words as typed, each a prefix (``"capit"*``), so no character is query syntax."""
    return " ".join('"' + w.replace('"', '""') + '"*' for w in text.split())


def local_day(stamp: str) -> date:
    """The local calendar day of a stored UTC timestamp."""
    return datetime.fromisoformat(stamp).astimezone().date()


class HistoryDialog(QDialog):
    """Conversations newest first (filtered by day), a search box whose hits open their
    conversation with the matching turn highlighted, and Copy, Export, Delete."""

    def __init__(self, path: str | Path | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("historyDialog")
        self.setWindowTitle("Conversation history")
        self.resize(960, 620)
        self.store = HistoryStore(path)
        self.highlighted_turn: int | None = None
        self._pending_hit: SearchHit | None = None
        self._searching = LatestLane(self, "parley-history-search")
        self._timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._timer.timeout.connect(self.search_now)

        self.search = QLineEdit(placeholderText="Search what was said…", clearButtonEnabled=True)
        self.search.setObjectName("historySearch")
        self.search.setAccessibleName("Search the history")
        self.search.textChanged.connect(lambda _t: self._timer.start())
        self.search.returnPressed.connect(self.search_now)
        self.day = QComboBox()
        self.day.setObjectName("historyDay")
        self.day.setAccessibleName("Show conversations of the day")
        self.day.currentIndexChanged.connect(lambda _i: self._fill_list())
        self.results = QListWidget()
        self.results.setObjectName("historyResults")
        self.results.setAccessibleName("Search results")
        self.results.setVisible(False)
        self.results.currentItemChanged.connect(lambda item, _old: self.open_hit(item))
        self.list = QListWidget()
        self.list.setObjectName("historyConversations")
        self.list.setAccessibleName("Past conversations")
        self.view = QTextBrowser()
        self.view.setObjectName("historyConversation")
        self.view.setAccessibleName("The selected conversation")
        self.view.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.status = QLabel(self.store.notice or "")
        self.status.setObjectName("historyStatus")
        self.status.setWordWrap(True)

        self.copy = self._button("Copy", "Copy the conversation as Markdown", self.copy_selected)
        self.export_md = self._button("Export Markdown…", "Export Markdown",
                                      lambda: self._export("md"))
        self.export_json = self._button("Export JSON…", "Export JSON", lambda: self._export("json"))
        self.delete = self._button("Delete…", "Delete the conversation", self.delete_selected)
        self.delete.setObjectName("historyDelete")
        close = self._button("Close", "Close the history", self.accept)

        top = QHBoxLayout()
        top.addWidget(self.search, 1)
        day_label = QLabel("&Day:")
        day_label.setBuddy(self.day)
        top.addWidget(day_label)
        top.addWidget(self.day)
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.results)
        left.addWidget(self.list)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.view)
        split.setSizes([320, 640])
        buttons = QHBoxLayout()
        buttons.addWidget(self.status, 1)
        for button in (self.copy, self.export_md, self.export_json, self.delete, close):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addLayout(buttons)
        order = (self.search, self.day, self.results, self.list, self.view, self.copy,
                 self.export_md, self.export_json, self.delete, close)
        for first, second in itertools.pairwise(order):
            QWidget.setTabOrder(first, second)
        self.list.currentItemChanged.connect(self._show)
        self.reload()

    def _button(self, text: str, name: str, slot) -> QPushButton:
        button = QPushButton(text)
        button.setAccessibleName(name)
        button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        button.clicked.connect(lambda _checked=False: slot())
        return button

    # ------------------------------------------------------------------ listing
    def reload(self) -> None:
        """Re-read the days and the conversations, keeping the chosen day if it still has any."""
        chosen = self.day.currentData()
        days = sorted({local_day(s.started_at) for s in self.store.conversations(limit=None)},
                      reverse=True)
        self.day.blockSignals(True)
        self.day.clear()
        self.day.addItem("All days", None)
        for day in days:
            self.day.addItem(day.isoformat(), day.isoformat())
        index = self.day.findData(chosen) if chosen else 0
        self.day.setCurrentIndex(max(0, index))
        self.day.blockSignals(False)
        self._fill_list()

    def _fill_list(self, select: int | None = None) -> None:
        """List the chosen day's conversations, newest first; select ``select`` or the newest."""
        self.list.blockSignals(True)
        self.list.clear()
        for summary in self.store.conversations(self.day.currentData(), limit=LIST_LIMIT):
            item = QListWidgetItem(self._label(summary))
            item.setData(_ROLE, summary.id)
            self.list.addItem(item)
        rows = [i for i in range(self.list.count()) if self.list.item(i).data(_ROLE) == select]
        if self.list.count():
            self.list.setCurrentRow(rows[0] if rows else 0)
        self.list.blockSignals(False)
        has_any = self.list.count() > 0
        for button in (self.copy, self.export_md, self.export_json, self.delete):
            button.setEnabled(has_any)
        if has_any:
            self._show()
        else:
            self.view.setPlainText("No conversation stored yet.")

    @staticmethod
    def _label(summary: ConversationSummary) -> str:
        return (f"{summary.started_at[:16].replace('T', ' ')}  ·  "
                f"{summary.title or '(no words)'}  ({summary.turns} turns)")

    def selected_id(self) -> int | None:
        """The id of the conversation shown, or None."""
        item = self.list.currentItem()
        return None if item is None else int(item.data(_ROLE))

    def select_conversation(self, conversation_id: int) -> bool:
        """Show ``conversation_id``, switching the day filter to all days if it hides it."""
        for row in range(self.list.count()):
            if self.list.item(row).data(_ROLE) == conversation_id:
                self.list.setCurrentRow(row)
                return True
        if self.day.currentIndex() != 0:
            self.day.blockSignals(True)
            self.day.setCurrentIndex(0)
            self.day.blockSignals(False)
            self._fill_list(select=conversation_id)
            return self.selected_id() == conversation_id
        return False

    def _show(self, *_items) -> None:
        conversation_id = self.selected_id()
        self.highlighted_turn = None
        self.view.setExtraSelections([])
        if conversation_id is None:
            return
        try:
            self.view.setMarkdown(self.store.export(conversation_id, "md"))
        except ParleyError as exc:  # deleted by another window meanwhile
            self.view.setPlainText(str(exc))
            return
        hit, self._pending_hit = self._pending_hit, None
        if hit is not None and hit.conversation_id == conversation_id:
            self._highlight(hit.turn_id)

    def _highlight(self, turn_id: int) -> None:
        """Mark the turn's section (its heading to the next turn's) in the theme's
        selection colours, and scroll to it."""
        doc = self.view.document()
        start = doc.find(f"Turn {turn_id} ·")
        if start.isNull():
            return
        block = start.block().next()
        while block.isValid() and not (block.blockFormat().headingLevel()
                                       and block.text().startswith("Turn ")):
            block = block.next()
        cursor = QTextCursor(start.block())
        end = block.position() - 1 if block.isValid() else doc.characterCount() - 1
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        mark = QTextEdit.ExtraSelection()
        mark.cursor = cursor
        palette = self.view.palette()
        mark.format.setBackground(palette.highlight())
        mark.format.setForeground(palette.highlightedText())
        self.view.setExtraSelections([mark])
        self.view.setTextCursor(QTextCursor(start.block()))
        self.view.ensureCursorVisible()
        self.highlighted_turn = turn_id

    # ------------------------------------------------------------------ search
    def search_now(self) -> None:
        """Search the typed words off the GUI thread; an empty box hides the results."""
        self._timer.stop()
        text = self.search.text().strip()
        if not text:
            self._searching.drop()  # an older query's answer would show the results again
            self.results.clear()
            self.results.setVisible(False)
            return
        query = search_query(text)
        # Newer typing supersedes this query: its answer is dropped (the lane's rule).
        self._searching.call(JobKind.SEARCH, lambda: self.store.search(query, limit=100, marks=_MARKS),
                             lambda hits: self._on_searched(hits, ""),
                             lambda failure: self._on_searched([], str(failure.error)))

    def _on_searched(self, hits: list[SearchHit], error: str) -> None:
        self.results.blockSignals(True)
        self.results.clear()
        for hit in hits:
            when = hit.finished_at[:16].replace("T", " ")
            item = QListWidgetItem(f"{when}  ·  {hit.title or '(no words)'}\n"
                                   f"Turn {hit.turn_id}: {' '.join(hit.snippet.split())}")
            item.setData(_ROLE, hit)
            item.setToolTip(f"You: {hit.transcript}\nParley: {hit.reply}")
            self.results.addItem(item)
        self.results.blockSignals(False)
        self.results.setVisible(True)
        if error:
            self.results.addItem(QListWidgetItem(f"Cannot search: {error}"))
        elif not hits:
            self.results.addItem(QListWidgetItem("No turn matches."))
        n = len(hits)
        self.status.setText(error or f"{n} matching turn{'s' if n != 1 else ''}")

    def open_hit(self, item: QListWidgetItem | None) -> None:
        """Show the hit's conversation with its matching turn highlighted."""
        hit = None if item is None else item.data(_ROLE)
        if not isinstance(hit, SearchHit):
            return
        self._pending_hit = hit
        if self.selected_id() == hit.conversation_id:
            self._show()
        elif not self.select_conversation(hit.conversation_id):
            self._pending_hit = None
            self.status.setText(f"conversation {hit.conversation_id} is no longer stored")

    # ------------------------------------------------------------------ actions
    def copy_selected(self) -> None:
        """Put the selected conversation on the clipboard as Markdown."""
        conversation_id = self.selected_id()
        if conversation_id is None:
            return
        try:
            QGuiApplication.clipboard().setText(self.store.export(conversation_id, "md"))
        except ParleyError as exc:
            self.status.setText(f"could not copy: {exc}")
            return
        self.status.setText("copied the conversation as Markdown")

    def confirm_delete(self, summary_text: str) -> bool:
        """Ask before deleting; tests replace this to answer."""
        return confirm(self, "Delete conversation",
                       f"Delete this conversation and all its turns from the history?\n\n{summary_text}\n\n"
                       "This cannot be undone.")

    def delete_selected(self) -> bool:
        """Delete the selected conversation after confirmation; True if it was deleted."""
        conversation_id = self.selected_id()
        if conversation_id is None or not self.confirm_delete(self.list.currentItem().text()):
            return False
        try:
            turns = self.store.delete(conversation_id)
        except ParleyError as exc:
            self.status.setText(f"could not delete: {exc}")
            return False
        self.reload()
        if self.search.text().strip():
            self.search_now()  # its hits may point at the deleted conversation
        self.status.setText(f"deleted conversation {conversation_id} ({turns} turns)")
        return True

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

    def wait_search(self) -> None:
        """Block until the searches submitted so far have run (for tests and closing)."""
        self._searching.wait_idle(30.0)

    def done(self, result: int) -> None:
        self._timer.stop()
        self._searching.shutdown(30.0)  # answers still on their way are dropped
        self.store.close()
        super().done(result)
