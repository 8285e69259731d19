"""The app keeps its conversation: turns go to the history as they finish, and the
History dialog reopens and exports past conversations."""

from __future__ import annotations

import json

import pytest

from app.history.browser import HistoryDialog
from engine.history.store import HistoryStore
from tests.support.history import finished_turn


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "history.db"
    store = HistoryStore(path)
    first = store.start_conversation("desktop", [])
    store.add_turn(first, finished_turn(1, "What is the capital of France?", "Paris."))
    second = store.start_conversation("desktop", [])
    store.add_turn(second, finished_turn(2, "Use snake_case for names.", "Use **snake_case**."))
    store.close()
    return path


def test_history_dialog_reopens_and_exports_a_conversation(qtbot, history, tmp_path):
    dialog = HistoryDialog(history)
    qtbot.addWidget(dialog)
    assert dialog.list.count() == 2
    assert "snake_case" in dialog.list.item(0).text()  # newest first
    assert "Use snake_case for names." in dialog.view.toPlainText()
    dialog.list.setCurrentRow(1)
    assert "capital of France" in dialog.view.toPlainText()
    out = dialog.export_to(tmp_path / "out.json", "json")
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [t["transcript"] for t in data["turns"]] == ["What is the capital of France?"]
    md = dialog.export_to(tmp_path / "out.md", "md").read_text(encoding="utf-8")
    assert "Paris." in md
    assert all(b.accessibleName() for b in (dialog.export_md, dialog.export_json))
    dialog.done(0)


def test_an_empty_history_says_so(qtbot, tmp_path):
    dialog = HistoryDialog(tmp_path / "empty.db")
    qtbot.addWidget(dialog)
    assert dialog.list.count() == 0 and not dialog.export_md.isEnabled()
    assert "No conversation" in dialog.view.toPlainText()
    dialog.done(0)
