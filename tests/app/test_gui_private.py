"""Private by default, in the window: File > Private conversation starts a conversation
that the history does not store (a strip says so while it lasts; ending it starts over,
stored again), and Settings > Conversation > History (``history.enabled``) turns the
history off, at once, which the strip says too.

The conversation runs through the real pipeline: the bundled offline speech models, the
LLM a loopback chat server (``tests/support/chat_server.py``), typed messages as the
message box sends them; the history database is the test's own (``PARLEY_DATA_DIR``).
"""

from __future__ import annotations

import os
import sqlite3

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from app.conversation.private import HISTORY_OFF_TEXT, PRIVATE_TEXT
from app.window.main_window import MainWindow
from engine.audio.file_sink import FileSink
from engine.config import EngineConfig
from engine.history.store import HistoryStore
from tests.support.chat_server import ChatServer
from tests.support.sources import Quiet

SPEECH = {"stt.backend": "faster-whisper", "tts.backend": "piper", "turns.barge_in": "off"}


def test_the_private_action_shows_the_strip_and_history_off_says_so(qtbot, gui_settings):
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    private = window.chat.private
    assert not private.strip.isVisible() and not private.action.isChecked()
    assert private.action in window.menus["file"].actions()
    private.action.trigger()  # File > Private conversation
    assert private.active and private.strip.isVisible() and private.end_button.isVisible()
    assert private.label.text() == PRIVATE_TEXT
    private.end_button.click()
    assert not private.active and not private.action.isChecked() and not private.strip.isVisible()
    # The history turned off in Settings: the strip says so, with nothing to end.
    window.controller.config = window.controller.config.with_overrides({"history.enabled": False})
    window.controller.config_changed.emit(window.controller.config)
    assert private.strip.isVisible() and private.label.text() == HISTORY_OFF_TEXT
    assert not private.end_button.isVisible()
    window.close()


def test_settings_show_the_history_switch_and_it_applies_now(qtbot):
    from app.settings.panel import SettingsPanel

    panel = SettingsPanel(EngineConfig())
    qtbot.addWidget(panel)
    box = panel.fields["history.enabled"]
    assert box.isChecked() and box.text().startswith("Store conversations")
    assert box.accessibleName() == "History"
    box.setChecked(False)
    assert panel.config_from_widgets().history.enabled is False
    assert panel.pending.text() == "history.enabled: applies now"


def _turns(db) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as raw:
        return raw.execute("SELECT count(*) FROM turns").fetchone()[0]


@pytest.mark.slow
def test_a_private_conversation_stores_nothing_while_its_turns_happen(qtbot, gui_settings, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path))  # the test's own history database
    db = tmp_path / "history.db"
    server = ChatServer()
    try:
        config = EngineConfig().with_overrides(
            {**SPEECH, "llm.backend": "openai", "llm.base_url": server.url, "llm.model": server.model})
        window = MainWindow(config, gui_settings, autoload=False)
        qtbot.addWidget(window)
        window.show()
        c = window.controller
        c.apply(config)
        qtbot.waitUntil(lambda: c.engine is not None and not c.worker.busy, timeout=300_000)
        finished: list = []
        window.bridge.turn_finished.connect(lambda record: finished.append(record))
        c.start_with([Quiet()], [FileSink(None, realtime=False)])
        qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)

        def say(text: str) -> None:
            before = len(finished)
            c.say(text, speak=False)
            qtbot.waitUntil(lambda: len(finished) > before and not c.worker.busy, timeout=60_000)
            assert c.history.flush()

        say("Hello before.")
        assert _turns(db) == 1
        window.chat.private.action.trigger()  # File > Private conversation
        qtbot.waitUntil(lambda: not c.worker.busy, timeout=30_000)
        assert window.chat.private.strip.isVisible()
        for text in ("My secret one.", "My secret two."):
            say(text)
        assert _turns(db) == 1  # the private turns happened, and nothing was stored
        window.chat.private.end_button.click()
        qtbot.waitUntil(lambda: not c.worker.busy, timeout=30_000)
        say("Hello after.")
        # Settings > Conversation > History cleared and applied: in place, nothing stored.
        c.apply(c.config.with_overrides({"history.enabled": False}))
        qtbot.waitUntil(lambda: not c.config.history.enabled and not c.worker.busy, timeout=30_000)
        assert window.chat.private.strip.isVisible()
        say("Not kept either.")
        assert _turns(db) == 2
        window.close()
    finally:
        server.close()
    with HistoryStore(db) as store:
        stored = [[t.transcript for t in store.conversation(conv.id).turns]
                  for conv in reversed(store.conversations())]
    assert stored == [["Hello before."], ["Hello after."]]


def test_the_history_search_asks_first_with_a_remote_llm_and_the_dialog_says_why(qtbot, tmp_path):
    """Settings > Tools lists an "Ask before running" box for ``search_history`` only while
    the LLM is remote; its dialog says its answer would go to the remote server."""
    from app.settings.panel import SettingsPanel
    from app.tools.confirm import ConfirmDialog
    from engine.backends.base import ToolCall
    from engine.tools.builtins import built_in_tools
    from engine.tools.registry import ToolSupport
    from engine.tools.timers import TimerBook

    infos = tuple(t.info for t in built_in_tools(TimerBook(tmp_path / "timers.json"),
                                                 lambda: tmp_path / "history.db").values())
    panel = SettingsPanel(EngineConfig())
    qtbot.addWidget(panel)
    panel.set_tool_support(ToolSupport(True, "", infos))
    assert "search_history" not in panel.tools.asks
    panel.set_tool_support(ToolSupport(True, "", infos, remote_llm=True))
    box = panel.tools.asks["search_history"]
    assert box.isChecked() and "remote language model's server" in box.toolTip()
    box.setChecked(False)  # trusted: it runs without asking
    assert panel.config_from_widgets().tools.trusted == "search_history"
    search = next(info for info in infos if info.name == "search_history")
    dialog = ConfirmDialog(ToolCall("call_1", "search_history", '{"query": "Edinburgh"}'), search)
    qtbot.addWidget(dialog)
    from PySide6.QtWidgets import QLabel

    said = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert "It returns your stored conversations" in said and "remote server" in said
    assert "side effects" not in said
