"""While it thinks and while it speaks: the "Thinking…" cue when a reply is slow to start,
and the "Stop talking" button while a reply is heard."""

from __future__ import annotations

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.core.controller import ControllerMode
from app.conversation.view import ConversationView
from app.window.main_window import MainWindow
from app.conversation.stop_talking import playing_turn, reply_playing
from engine.config import EngineConfig
from engine.measures import Figure, Mark
from engine.pipeline.events import FinalTranscript, ReplyText, TurnCancelled, UserSpeaking
from engine.pipeline.metrics import Metrics
from tests.support.gui import snapshot_from


@pytest.fixture
def window(qtbot, gui_settings):
    w = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(w)
    w.conversation.thinking_delay_ms = 50  # the real 1 s, shortened for the test
    w.conversation.thinking_step_ms = 20
    w.show()
    yield w
    w.controller.engine = None
    w.controller.mode = ControllerMode.IDLE
    w.close()


def _committed_turn(window, turn: int = 1, text: str = "what is the time") -> None:
    window.bridge.on_event(UserSpeaking(0, turn, True))
    window.bridge.on_event(UserSpeaking(0, turn, False))
    window.bridge.on_event(FinalTranscript(0, turn, text))


# ---------------------------------------------------------------- thinking cue
def test_thinking_shows_when_the_reply_is_late_and_goes_when_it_starts(window, qtbot):
    view = window.conversation
    _committed_turn(window)
    qtbot.waitUntil(lambda: view.item(1) is not None and view.item(1).transcript is not None, timeout=2000)
    item = view.item(1)
    assert not item.thinking  # not at once: within the delay a fast reply shows no cue
    qtbot.waitUntil(lambda: item.thinking, timeout=2000)
    assert item.thinking_bubble.isVisible() and item.reply_caption.isVisible()
    assert view.thinking_turns() == [1]
    # The dots move while it waits.
    texts = set()
    qtbot.waitUntil(lambda: texts.add(item.thinking_bubble.text()) or len(texts) >= 3, timeout=2000)
    assert all(t.startswith("Thinking") for t in texts)
    window.bridge.on_event(ReplyText(0, 1, "It is noon."))
    qtbot.waitUntil(lambda: not item.thinking, timeout=2000)
    assert item.reply_bubble.isVisible() and "noon" in item.reply
    assert view.thinking_turns() == []


def test_the_thinking_sound_is_off_by_default_and_chimes_once_switched_on(window, qtbot):
    from app.conversation.thinking_sound import chime
    from engine.audio.file_sink import FileSink

    sinks: list[FileSink] = []

    def sink_factory():
        sinks.append(FileSink(None, realtime=False))
        return sinks[-1]

    sound = window.chat.thinking_sound
    sound.player.sink_factory = sink_factory
    assert not sound.enabled and sound.action in window.menus["view"].actions()
    _committed_turn(window, 1)
    qtbot.waitUntil(lambda: window.conversation.item(1).thinking, timeout=2000)
    assert sound.played == 0 and sinks == []  # off: silent
    sound.action.trigger()  # View > Thinking sound
    assert sound.enabled and window.settings.value("ui/thinking_sound") in (True, "true")
    _committed_turn(window, 2, "and the date")
    qtbot.waitUntil(lambda: window.conversation.item(2).thinking, timeout=2000)
    qtbot.waitUntil(lambda: sound.played == 1 and not sound.player.playing, timeout=5000)
    (sink,) = sinks
    heard = sink.audio
    tone = chime()
    assert heard.size >= tone.size * 0.9  # the whole chime (resampled to the sink's rate)
    assert 0.05 < float(np.abs(heard).max()) < 0.2  # audible, and soft


def test_a_quick_reply_never_shows_thinking(window, qtbot):
    view = window.conversation
    view.thinking_delay_ms = 300
    _committed_turn(window)
    window.bridge.on_event(ReplyText(0, 1, "Hello."))
    qtbot.waitUntil(lambda: view.item(1) is not None and bool(view.item(1).reply), timeout=2000)
    qtbot.wait(400)
    assert not view.item(1).thinking


@pytest.mark.parametrize("reason", ["barge_in", "reopened"])
def test_a_cancelled_turn_stops_thinking(window, qtbot, reason):
    view = window.conversation
    _committed_turn(window)
    qtbot.waitUntil(lambda: view.item(1) is not None and view.item(1).thinking, timeout=2000)
    window.bridge.on_event(TurnCancelled(0, 1, reason))
    qtbot.waitUntil(lambda: not view.item(1).thinking, timeout=2000)
    qtbot.wait(150)  # and it does not come back
    assert not view.item(1).thinking


def test_nothing_recognised_waits_for_no_reply(window, qtbot):
    view = window.conversation
    _committed_turn(window, text="")
    qtbot.waitUntil(lambda: view.item(1) is not None, timeout=2000)
    qtbot.wait(200)
    assert not view.item(1).thinking


def test_a_new_turn_ends_the_wait_of_the_last(qtbot):
    view = ConversationView()
    qtbot.addWidget(view)
    view.thinking_delay_ms = 10
    view.show()
    view.on_final(0, 1, "hello")
    qtbot.waitUntil(lambda: view.item(1).thinking, timeout=2000)
    view.on_user_speaking(0, 2, True)
    assert not view.item(1).thinking
    view.on_final(0, 2, "are you there")
    qtbot.waitUntil(lambda: view.item(2).thinking, timeout=2000)
    view.clear()
    assert view.thinking_turns() == []


# ---------------------------------------------------------------- stop talking
def _speaking_metrics(finished: bool, heard_ago: float, audio_s: float = 2.0) -> Metrics:
    metrics = Metrics()
    now = time.perf_counter()
    metrics.mark(0, 1, Mark.SPEECH_END, now - heard_ago - 0.8)
    metrics.mark(0, 1, Mark.AUDIO_OUT_FIRST, now - heard_ago)
    if finished:
        metrics.figure(0, 1, Figure.TTS_AUDIO_S, audio_s)
        metrics.set_finished(0, 1)
    return metrics


def test_reply_playing_reads_the_snapshot():
    assert not reply_playing(None)
    assert playing_turn(snapshot_from(_speaking_metrics(False, 0.1))) == (0, 1)
    assert reply_playing(snapshot_from(_speaking_metrics(True, 0.5, audio_s=2.0)))  # still audible
    assert not reply_playing(snapshot_from(_speaking_metrics(True, 5.0, audio_s=2.0)))  # long over
    cut = _speaking_metrics(False, 0.1)
    cut.set_cancelled(0, 1)
    assert not reply_playing(snapshot_from(cut))
    silent = Metrics()
    silent.mark(0, 1, Mark.SPEECH_END, time.perf_counter())  # still thinking: nothing heard
    assert not reply_playing(snapshot_from(silent))


def test_stop_talking_shows_while_a_reply_plays_and_interrupts(window, qtbot, monkeypatch):
    button = window.chat.stop_talking
    calls = []
    monkeypatch.setattr(window.controller, "interrupt", lambda: calls.append("interrupt"))
    window.controller.mode = ControllerMode.MIC
    assert button.isHidden()
    snap = {"now": snapshot_from(_speaking_metrics(False, 0.1))}
    monkeypatch.setattr(window.controller, "snapshot", lambda: snap["now"])
    qtbot.waitUntil(button.isVisible, timeout=2000)  # the window's 10 Hz timer
    assert button.accessibleName() == "Stop talking"
    # The reply ends: the button goes.
    snap["now"] = snapshot_from(_speaking_metrics(True, 5.0))
    qtbot.waitUntil(button.isHidden, timeout=2000)
    # Another reply plays; a click interrupts it and hides the button for good.
    playing = _speaking_metrics(False, 0.1)
    snap["now"] = snapshot_from(playing)
    qtbot.waitUntil(button.isVisible, timeout=2000)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert calls == ["interrupt"] and button.isHidden()
    qtbot.wait(250)  # a snapshot taken before the cut must not bring it back
    assert button.isHidden()


def test_stop_talking_hides_on_barge_in_and_when_idle(window, qtbot, monkeypatch):
    button = window.chat.stop_talking
    window.controller.mode = ControllerMode.MIC
    snap = snapshot_from(_speaking_metrics(False, 0.1))
    monkeypatch.setattr(window.controller, "snapshot", lambda: snap)
    qtbot.waitUntil(button.isVisible, timeout=2000)
    window.bridge.on_event(TurnCancelled(0, 1, "barge_in"))
    qtbot.waitUntil(button.isHidden, timeout=2000)
    button.new_engine()
    qtbot.waitUntil(button.isVisible, timeout=2000)
    window.controller.mode = ControllerMode.IDLE  # stopped listening: nothing plays
    qtbot.waitUntil(button.isHidden, timeout=2000)
