"""The history browser: search finds a stored turn and opens it highlighted, days filter
the list, Copy puts Markdown on the clipboard, Delete asks first; every control is
reachable with Tab and has an accessible name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QAbstractButton, QApplication, QComboBox, QLineEdit, QListWidget, QMessageBox,
                               QTextBrowser)

from app.history.browser import HistoryDialog, search_query
from engine.history.store import HistoryStore, utc_iso
from tests.support.history import finished_turn

INTERACTIVE = (QAbstractButton, QLineEdit, QComboBox, QListWidget, QTextBrowser)


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "history.db"
    store = HistoryStore(path)
    old = datetime.now(UTC) - timedelta(days=3)
    first = store.start_conversation("desktop", [], started_at=utc_iso(old))
    store.add_turn(first, finished_turn(1, "What is the capital of France?", "Paris."),
                   finished_at=utc_iso(old))
    store.add_turn(first, finished_turn(2, "And of Italy?", "Rome, the eternal city."),
                   finished_at=utc_iso(old))
    store.add_turn(first, finished_turn(3, "Thanks.", "You are welcome."), finished_at=utc_iso(old))
    second = store.start_conversation("desktop", [])
    store.add_turn(second, finished_turn(1, "Use snake_case for names.", "Use **snake_case**."))
    store.close()
    return path


@pytest.fixture
def dialog(qtbot, history):
    dialog = HistoryDialog(history)
    qtbot.addWidget(dialog)
    yield dialog
    dialog.done(0)


def _search(qtbot, dialog, text):
    dialog.search.setText(text)
    dialog.search_now()
    qtbot.waitUntil(lambda: dialog.results.isVisibleTo(dialog) and dialog.results.count() > 0,
                    timeout=5000)


def test_history_search_finds_a_stored_turn_and_opens_it_highlighted(qtbot, dialog):
    assert dialog.selected_id() == 2  # the newest conversation is shown first
    _search(qtbot, dialog, "eternal cit")  # words as typed, the last a prefix
    assert dialog.results.count() == 1
    item = dialog.results.item(0)
    assert "Turn 2" in item.text() and "«eternal»" in item.text()
    dialog.results.setCurrentRow(0)  # opening a hit
    assert dialog.selected_id() == 1
    assert "Rome, the eternal city." in dialog.view.toPlainText()
    assert dialog.highlighted_turn == 2
    (mark,) = dialog.view.extraSelections()
    assert "eternal city" in mark.cursor.selectedText()
    assert "capital of France" not in mark.cursor.selectedText()
    assert "1 matching turn" in dialog.status.text()


def test_search_with_no_match_or_query_syntax_says_so(qtbot, dialog):
    _search(qtbot, dialog, 'zebra" OR (')
    assert dialog.results.item(0).text() == "No turn matches."
    dialog.search.setText("")
    dialog.search_now()
    assert not dialog.results.isVisibleTo(dialog)
    assert search_query('a"b c') == '"a""b"* "c"*'


def test_typing_searches_after_a_pause(qtbot, dialog):
    dialog.search.setText("snake")
    qtbot.waitUntil(lambda: dialog.results.count() == 1, timeout=5000)
    assert "snake_case" in dialog.results.item(0).text()


def test_the_day_filter_lists_one_day_and_a_hit_resets_it(qtbot, dialog):
    assert dialog.day.count() == 3  # all days, today, three days ago
    dialog.day.setCurrentIndex(1)  # the newest day: only the second conversation
    assert dialog.list.count() == 1 and dialog.selected_id() == 2
    _search(qtbot, dialog, "France")
    dialog.results.setCurrentRow(0)
    assert dialog.day.currentIndex() == 0 and dialog.selected_id() == 1
    assert dialog.highlighted_turn == 1


def test_copy_puts_the_conversation_on_the_clipboard_as_markdown(dialog):
    QGuiApplication.clipboard().clear()
    dialog.copy.click()
    text = QGuiApplication.clipboard().text()
    assert text.startswith("# Use snake_case for names.")
    assert "**Parley:**" in text and "copied" in dialog.status.text()


def test_delete_asks_first_and_cancel_keeps_the_conversation(dialog, history, monkeypatch):
    asked = []
    monkeypatch.setattr(dialog, "confirm_delete", lambda text: asked.append(text) or False)
    dialog.delete.click()
    assert asked and "snake_case" in asked[0]
    assert dialog.list.count() == 2
    with HistoryStore(history) as store:
        assert len(store.conversations()) == 2


def test_delete_after_confirmation_removes_it_from_list_store_and_search(qtbot, dialog, history):
    def accept_box():
        modal = QApplication.activeModalWidget()
        if not isinstance(modal, QMessageBox):
            QTimer.singleShot(50, accept_box)
            return
        assert modal.windowTitle() == "Delete conversation"
        modal.button(QMessageBox.StandardButton.Yes).click()

    QTimer.singleShot(50, accept_box)  # the real QMessageBox, answered Yes
    assert dialog.delete_selected() is True
    assert dialog.list.count() == 1 and dialog.selected_id() == 1
    assert "deleted conversation 2" in dialog.status.text()
    with HistoryStore(history) as store:
        assert [c.id for c in store.conversations()] == [1]
        assert store.search('"snake"') == []


def test_every_control_has_a_name_and_is_reached_with_tab(qtbot, dialog):
    dialog.search.setText("Paris")
    dialog.search_now()
    qtbot.waitUntil(lambda: dialog.results.count() > 0, timeout=5000)
    dialog.show()
    qtbot.waitExposed(dialog)
    widgets = [w for cls in INTERACTIVE for w in dialog.findChildren(cls)
               if w.isVisibleTo(dialog) and w.isEnabled() and w.window() is dialog
               and not isinstance(w.parent(), QLineEdit)]  # its clear button: Esc does that
    assert len(widgets) >= 10
    for widget in widgets:
        assert widget.accessibleName(), f"{widget!r} has no accessible name"
        assert widget.focusPolicy() & Qt.FocusPolicy.TabFocus, f"{widget!r} is not a tab stop"
    dialog.activateWindow()
    dialog.search.setFocus()
    reached = set()
    for _ in range(3 * len(widgets)):
        focus = dialog.focusWidget()
        reached.add(focus)
        dialog.focusNextChild()
    missing = [w.accessibleName() for w in widgets if w not in reached
               and not any(w.isAncestorOf(r) for r in reached if r is not None)]
    assert not missing, f"not reached with Tab: {missing}"
