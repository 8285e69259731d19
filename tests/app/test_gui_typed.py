"""Type or talk in the window: the message box (Enter, Shift+Enter, Up), a typed question
answered through the real offline models (spoken, or in text only), cut off by Esc and by
speech; the tool-call rows and the summary marker of the conversation view; the header's
echo line and Interrupt, enabled only while a reply is thought or heard.

The real-model tests share one ModelRegistry (the models load once for the module) and
run the pipeline on a silent source (``tests.support.sources.Quiet``: a user who only
types) or on one that speaks once a reply plays, with a paced FileSink as the speaker.
``make screenshots`` writes the typed exchange, light and dark, to resources/screenshots.
"""

from __future__ import annotations

import dataclasses
import os
import time
from types import SimpleNamespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.conversation.composer import Composer
from app.core import theme
from app.core.controller import ControllerMode, ControllerState
from app.core.theme import load_stylesheet
from app.window.main_window import MainWindow, echo_text
from engine.audio.decode import load_audio
from engine.audio.file_sink import FileSink
from engine.backends.base import ToolCall
from engine.config import EngineConfig
from engine.engine import Engine
from engine.measures import Figure, Mark
from engine.pipeline.events import (HistorySummarized, ReplyText, ToolCallFinished, ToolCallStarted,
                                    TurnFinished)
from engine.pipeline.metrics import Metrics, TurnKind
from engine.models.model_registry import ModelRegistry
from tests.support.chat_server import ChatServer
from tests.support.gui import snapshot_from
from tests.support.screenshots import screenshot_folder, shoot_light_and_dark
from tests.support.sources import Quiet, SpeakWhenReplyPlays

OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "full-duplex", "turns.speculative": "false", "llm.max_new_tokens": "32"}


# ---------------------------------------------------------------------- the message box
@pytest.fixture
def composer(qtbot, gui_settings):
    widget = Composer(gui_settings)
    qtbot.addWidget(widget)
    widget.set_why_not(None)
    sent: list[tuple[str, bool]] = []
    widget.send.connect(lambda text, spoken: sent.append((text, spoken)))
    return widget, sent


def test_enter_sends_shift_enter_breaks_the_line_up_recalls(composer, qtbot):
    widget, sent = composer
    box = widget.box
    qtbot.keyClicks(box, "first line")
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "second")
    assert box.toPlainText() == "first line\nsecond" and sent == []
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert sent == [("first line\nsecond", True)] and box.toPlainText() == ""
    qtbot.keyClick(box, Qt.Key.Key_Enter)  # an empty box sends nothing
    assert len(sent) == 1
    qtbot.keyClick(box, Qt.Key.Key_Up)
    assert box.toPlainText() == "first line\nsecond"
    qtbot.keyClick(box, Qt.Key.Key_Up)  # in a box with text, Up moves the cursor
    assert box.toPlainText() == "first line\nsecond"
    widget.text_only.setChecked(True)
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert sent[-1] == ("first line\nsecond", False)


def test_the_box_and_the_recording_item_say_why_they_cannot_act(qtbot, gui_settings):
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    composer, recording = window.chat.composer, window.recording_action
    assert not composer.box.isEnabled() and not composer.send_button.isEnabled()
    assert "No models are loaded" in composer.box.toolTip()
    assert not recording.isEnabled() and "No models are loaded" in recording.toolTip()
    window.controller.engine = SimpleNamespace(placements={})  # loaded, not started
    window._state_changed(ControllerState.READY)
    window.tick()
    # Loaded, not started: a message starts a conversation for typing (the mic stays off).
    assert composer.box.isEnabled() and "Enter sends" in composer.box.toolTip()
    assert recording.isEnabled() and "Ctrl+O" in recording.toolTip()
    window.controller.mode = ControllerMode.MIC
    window._state_changed(ControllerState.LISTENING)
    window.tick()
    assert composer.box.isEnabled() and composer.send_button.isEnabled()
    assert "Enter sends" in composer.box.toolTip()
    assert not recording.isEnabled() and "Stop the conversation first" in recording.toolTip()
    window.controller.engine, window.controller.mode = None, ControllerMode.IDLE
    window.close()


def test_a_message_that_cannot_be_sent_comes_back_with_the_reason(qtbot, gui_settings):
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    composer = window.chat.composer
    window.controller.say("Hello?")  # no engine: refused at once
    assert composer.box.toPlainText() == "Hello?"
    assert window.banner.messages[-1].startswith("The message was not sent: No models are loaded")
    window.close()


# ---------------------------------------------------------------------- the view's rows
def _deliver(qtbot, window, *events) -> None:
    for event in events:
        window.bridge.on_event(event)  # as a stage thread would: queued signals
    qtbot.wait(50)


def test_tool_calls_and_the_summary_marker_in_the_view(qtbot, gui_settings):
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    view = window.conversation
    clock = ToolCall("call_1", "current_time", '{"timezone": "Europe/Paris"}')
    broken = ToolCall("call_2", "calculator", '{"expression": "1/0"}')
    _deliver(qtbot, window, ToolCallStarted(0, 1, clock))
    assert view.tool_calls() == ['current_time(timezone="Europe/Paris") running…']
    _deliver(qtbot, window, ToolCallFinished(0, 1, clock, "14:05", None, 0.012),
             ToolCallStarted(0, 1, broken), ToolCallFinished(0, 1, broken, "", "division by zero", 0.5))
    assert view.tool_calls() == ['current_time(timezone="Europe/Paris") -> 14:05 (0.01 s)',
                                 'calculator(expression="1/0") error: division by zero (0.50 s)']
    rows = list(view.item(1).tool_rows.values())
    assert theme.current().error_text in rows[1].text() and theme.current().error_text not in rows[0].text()
    assert "0.50 s" in rows[1].text()

    # Three turns; the first two are summarised: the marker follows turn 2, closed.
    for turn in (1, 2, 3):
        window.bridge.on_event(TurnFinished(0, _record(turn)))
    _deliver(qtbot, window, HistorySummarized(0, "The user asked the time in Paris.", 2))
    marker = view.summary_marker
    body = view.widget().layout()
    assert body.indexOf(marker) == body.indexOf(view.item(2)) + 1
    assert not marker.expanded and marker.text.isHidden()
    qtbot.mouseClick(marker.toggle, Qt.MouseButton.LeftButton)
    assert marker.expanded and marker.text.isVisibleTo(window)
    assert marker.text.text() == "The user asked the time in Paris."
    # A later summary moves the marker and replaces the text.
    _deliver(qtbot, window, HistorySummarized(0, "Time in Paris, then the weather.", 3))
    assert body.indexOf(marker) == body.indexOf(view.item(3)) + 1 and marker.text.text().startswith("Time")
    view.clear()
    assert view.summary_marker is None and view.tool_calls() == []
    window.close()


def test_a_turn_the_assistant_opened_shows_no_words_of_the_user(qtbot, gui_settings):
    # The answer after a tool's output comes in a typed turn with no text of the user's:
    # no "listening…" bubble while it streams, no "(no words recognised)" after.
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    view = window.conversation
    _deliver(qtbot, window, ReplyText(0, 7, "It is two o'clock."))
    item = view.item(7)
    assert item.user_bubble.isHidden() and item.user_caption.isHidden()
    _deliver(qtbot, window, TurnFinished(0, _record(7, TurnKind.TYPED, transcript="")))
    assert item.user_bubble.isHidden() and not item.reply_bubble.isHidden()
    # A typed message shows the user's words even when its reply's first words came first.
    _deliver(qtbot, window, ReplyText(0, 8, "Hello."))
    view.on_typed(0, 8, "Hi there", True)
    assert not view.item(8).user_bubble.isHidden() and view.item(8).transcript == "Hi there"
    window.close()


def _record(turn: int, kind: TurnKind = TurnKind.SPOKEN, transcript: str | None = None):
    metrics = Metrics()
    metrics.mark(0, turn, Mark.SPEECH_END, time.perf_counter())
    metrics.set_transcript(0, turn, f"question {turn}" if transcript is None else transcript)
    metrics.add_reply(0, turn, f"answer {turn}")
    metrics.set_finished(0, turn)
    return dataclasses.replace(metrics.turn(0, turn), kind=kind)


# ---------------------------------------------------------------------- the header
def test_echo_line_and_interrupt_follow_what_they_can_do(qtbot, gui_settings, monkeypatch):
    assert echo_text("echo cancellation: on") == "Echo cancellation: on"
    assert echo_text(None) == ""
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    c = window.controller
    metrics = Metrics()  # one turn, answered and heard ten seconds ago
    now = time.perf_counter()
    for mark, ago in ((Mark.SPEECH_END, 12), (Mark.COMMITTED, 11), (Mark.AUDIO_OUT_FIRST, 10)):
        metrics.mark(0, 1, mark, now - ago)
    metrics.figure(0, 1, Figure.TTS_AUDIO_S, 2.0)
    metrics.set_finished(0, 1)
    shown = {"snap": dataclasses.replace(snapshot_from(metrics), echo="echo cancellation: on")}
    monkeypatch.setattr(c, "snapshot", lambda: shown["snap"])
    c.engine = SimpleNamespace(placements={})  # what the status line reads of a loaded engine
    c.mode = ControllerMode.MIC
    c.state = ControllerState.LISTENING
    window.tick()
    assert window.echo_label.text() == "Echo cancellation: on"
    assert not window.interrupt_button.isEnabled()
    assert "not thinking or speaking" in window.interrupt_button.toolTip()
    # A committed turn whose reply is being thought: Interrupt can act.
    metrics.mark(0, 2, Mark.COMMITTED, time.perf_counter())
    shown["snap"] = snapshot_from(metrics)
    window.tick()
    assert window.interrupt_button.isEnabled() and "Esc" in window.interrupt_button.toolTip()
    metrics.set_finished(0, 2)
    shown["snap"] = snapshot_from(metrics)
    window.tick()
    assert not window.interrupt_button.isEnabled()
    c.engine, c.mode = None, ControllerMode.IDLE
    window.close()


# ---------------------------------------------------------------------- the real models
@pytest.fixture(scope="module")
def registry():
    """The offline models, loaded once for the module: an engine holds them while each
    test's window builds its own engine on the same registry (the same keys: reused)."""
    shared = ModelRegistry()
    keeper = Engine(EngineConfig().with_overrides(OFFLINE), registry=shared)
    keeper.load()
    yield shared
    keeper.release_models()


def _window(qtbot, gui_settings, registry, **overrides) -> MainWindow:
    QApplication.instance().setStyleSheet(load_stylesheet())
    config = EngineConfig().with_overrides({**OFFLINE, **overrides})
    window = MainWindow(config, gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.finished = []  # every TurnRecord the bridge delivered, in order
    window.bridge.turn_finished.connect(window.finished.append)
    window.controller.registry = registry
    window.resize(1280, 800)
    window.show()
    with qtbot.waitSignal(window.controller.engine_changed, timeout=600_000):
        window.controller.apply(config)
    qtbot.waitUntil(lambda: not window.controller.worker.busy, timeout=120_000)
    return window


def _run(qtbot, window: MainWindow, source, sink: FileSink) -> None:
    c = window.controller
    c.start_with([source], [sink])
    qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)
    window.tick()
    assert window.chat.composer.box.isEnabled()


def _type(qtbot, window: MainWindow, text: str) -> int:
    """Type ``text`` and press Enter; returns the turn id it was sent as."""
    box = window.chat.composer.box
    with qtbot.waitSignal(window.controller.typed_sent, timeout=30_000) as sent:
        qtbot.keyClicks(box, text)
        qtbot.keyClick(box, Qt.Key.Key_Return)
    return sent.args[1]


def _finished(qtbot, window: MainWindow, turn: int, timeout: int = 240_000):
    """The TurnRecords of ``turn`` the view was given (one once it finished)."""
    qtbot.waitUntil(lambda: any(r.turn_id == turn for r in window.finished), timeout=timeout)
    return [r for r in window.finished if r.turn_id == turn]


# A first turn SmolLM2-135M writes a note about when it is summarised (it writes none
# about some exchanges: tests/engine/test_history_summary.py).
FIRST = "Hi, my name is Anna and I live in Berlin."
SECOND = "What is the capital of France?"


@pytest.mark.slow
def test_a_typed_question_is_answered_spoken_or_in_text_only(qtbot, gui_settings, registry, tmp_path):
    # One past turn kept in the prompt: after the second, the first is summarised.
    window = _window(qtbot, gui_settings, registry, **{"llm.history_turns": "1"})
    sink = FileSink(None, realtime=False)
    _run(qtbot, window, Quiet(), sink)
    view = window.conversation

    turn = _type(qtbot, window, FIRST)
    (record,) = _finished(qtbot, window, turn)
    item = view.item(turn)
    assert item.typed and item.transcript == FIRST
    assert item.user_caption.text() == "You  ·  typed"
    assert record.kind is TurnKind.TYPED and record.reply and item.reply == record.reply
    assert len(item.reply.split()) >= 2
    spoken = sink.audio.size
    assert spoken > sink.sample_rate * 0.5  # the reply was spoken, on the injected sink

    window.chat.composer.text_only.setChecked(True)
    second = _type(qtbot, window, SECOND)
    (silent,) = _finished(qtbot, window, second)
    assert silent.reply and view.item(second).reply == silent.reply
    assert "reply in text only" in view.item(second).user_caption.text()
    assert sink.audio.size == spoken  # not one sample more
    # Up in the empty box brings the last message back.
    qtbot.keyClick(window.chat.composer.box, Qt.Key.Key_Up)
    assert window.chat.composer.box.toPlainText() == SECOND
    window.chat.composer.box.clear()
    # Between turns the first one was summarised: the marker follows it, the summary on a click.
    metrics = window.controller.engine.metrics
    qtbot.waitUntil(lambda: Mark.SUMMARY_END in metrics.turn(0, second).marks, timeout=240_000)
    qtbot.waitUntil(lambda: view.summary_marker is not None, timeout=5_000)
    marker = view.summary_marker
    body = view.widget().layout()
    assert marker.through_turn == turn and body.indexOf(marker) == body.indexOf(item) + 1
    assert marker.summary.strip() and marker.text.isHidden()
    qtbot.mouseClick(marker.toggle, Qt.MouseButton.LeftButton)
    assert marker.text.isVisibleTo(window) and marker.text.text() == marker.summary

    shots = shoot_light_and_dark(qtbot, window, screenshot_folder(tmp_path), "typed_exchange")
    assert all(p.stat().st_size > 20_000 for p in shots)
    window.close()
    assert window.shutdown_stuck == []
    # The history stored both turns, as typed.
    from engine.history.store import HistoryStore

    store = HistoryStore()  # the test session's PARLEY_DATA_DIR (tests/conftest.py)
    try:
        stored = {t.transcript: t.kind for c in store.conversations(limit=None)
                  for t in store.conversation(c.id).turns}
    finally:
        store.close()
    assert stored.get(FIRST) is TurnKind.TYPED and stored.get(SECOND) is TurnKind.TYPED, stored


@pytest.mark.slow
def test_a_message_typed_while_stopped_starts_a_conversation_with_the_mic_off(
        qtbot, gui_settings, registry):
    # A quiet office, a microphone that does not work: typing alone is a conversation.
    window = _window(qtbot, gui_settings, registry)
    c, view = window.controller, window.conversation
    assert c.mode is ControllerMode.IDLE
    window.chat.composer.text_only.setChecked(True)
    turn = _type(qtbot, window, SECOND)
    (record,) = _finished(qtbot, window, turn)
    assert record.kind is TurnKind.TYPED and record.reply and view.item(turn).reply == record.reply
    assert c.mode is ControllerMode.TYPED and c.state is ControllerState.TYPING
    assert window.pill.text() == "Typing (mic off)" and window.listen_button.text() == "Listen"
    # Listen goes on with the microphone, in the same conversation.
    window.listen_button.click()
    qtbot.waitUntil(lambda: c.mode is ControllerMode.MIC and not c.worker.busy, timeout=30_000)
    assert window.listen_button.text() == "Stop"
    assert [e.user for e in c.engine.units[0].chat_history.exchanges()] == [SECOND]
    window.close()
    assert window.shutdown_stuck == []


LONG = {"llm.max_new_tokens": "120", "llm.max_sentences": "50",
        "llm.system_prompt": "Write a long essay about the user's words."}


@pytest.mark.slow
def test_esc_cuts_a_typed_reply_off(qtbot, gui_settings, registry):
    window = _window(qtbot, gui_settings, registry, **LONG)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    sink = FileSink(None, realtime=True)
    _run(qtbot, window, Quiet(), sink)
    turn = _type(qtbot, window, "Tell me about the history of Paris.")
    qtbot.waitUntil(lambda: window.interrupt_button.isEnabled() and sink.seconds_played > 0.3,
                    timeout=240_000)
    window.chat.composer.box.setFocus()
    qtbot.keyClick(window.chat.composer.box, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: bool(window.conversation.item(turn).cancelled), timeout=10_000)
    record = next(r for r in window.controller.engine.metrics.turns() if r.turn_id == turn)
    assert record.cancelled and Mark.REPLY_DONE not in record.marks
    qtbot.waitUntil(lambda: not window.interrupt_button.isEnabled(), timeout=10_000)
    window.close()
    assert window.shutdown_stuck == []


@pytest.mark.slow
def test_speech_cuts_a_typed_reply_off(qtbot, gui_settings, registry, one_two_three_path):
    window = _window(qtbot, gui_settings, registry, **LONG)
    sink = FileSink(None, realtime=True)
    speech = SpeakWhenReplyPlays(np.zeros(8000, np.float32), load_audio(one_two_three_path), sink)
    _run(qtbot, window, speech, sink)
    turn = _type(qtbot, window, "Tell me about the history of Paris.")
    view = window.conversation
    # The source speaks 0.4 s into the typed turn's reply: that reply is cut off, and
    # what was said becomes a spoken turn of its own, answered.
    qtbot.waitUntil(lambda: bool(view.item(turn).cancelled), timeout=240_000)
    qtbot.waitUntil(lambda: any(t > turn and bool(user and reply) for t, user, reply in view.turns()),
                    timeout=240_000)
    typed = next(r for r in window.controller.engine.metrics.turns() if r.turn_id == turn)
    assert typed.kind is TurnKind.TYPED and typed.cancelled and Mark.BARGE_IN in typed.marks
    assert "audio_out_first" in typed.marks and typed.marks[Mark.AUDIO_OUT_FIRST] < typed.marks[Mark.BARGE_IN]
    spoken = [(t, user) for t, user, _r in view.turns() if t > turn]
    assert spoken and not view.item(spoken[0][0]).typed
    window.close()
    assert window.shutdown_stuck == []


FAILING_TOOL = '''
TOOLS = [{"name": "explode_now", "description": "Always fails.", "side_effects": False}]


def explode_now():
    raise RuntimeError("the fuse was lit")
'''


@pytest.mark.slow
def test_typed_questions_tool_calls_show_in_the_view(qtbot, gui_settings, registry, tmp_path):
    # The scripted remote LLM streams the recorded calls of get_time and explode_now (a
    # user module's tool that raises); the window's view shows each call as it goes.
    module = tmp_path / "failing_tools.py"
    module.write_text(FAILING_TOOL, "utf-8")
    server = ChatServer()
    try:
        window = _window(qtbot, gui_settings, registry, **{
            "llm.backend": "openai", "llm.base_url": server.url, "llm.model": server.model,
            "tools.user_module": str(module)})
        _run(qtbot, window, Quiet(), FileSink(None, realtime=False))
        view = window.conversation
        window.chat.composer.text_only.setChecked(True)
        _type(qtbot, window, "What time is it?")
        qtbot.waitUntil(lambda: any(c.startswith("get_time(") and "running" not in c
                                    for c in view.tool_calls()), timeout=60_000)
        (row,) = [r for item in view._items for r in item.tool_rows.values()]
        assert row.error is None and row.result and row.seconds is not None
        assert "iso=" in row.summary() and f"· {row.seconds:.2f} s" in row.text()
        # The reply made with the tool's output quotes it (the chat server's tool reply).
        qtbot.waitUntil(lambda: any("the tool found" in reply for _t, _u, reply in view.turns()),
                        timeout=60_000)

        _type(qtbot, window, "Explode it.")
        qtbot.waitUntil(lambda: any(c.startswith("explode_now(") and "error" in c
                                    for c in view.tool_calls()), timeout=60_000)
        failed = [r for item in view._items for r in item.tool_rows.values() if r.call.name == "explode_now"]
        assert "the fuse was lit" in failed[0].error
        assert theme.current().error_text in failed[0].text()
        window.close()
        assert window.shutdown_stuck == []
    finally:
        server.close()
