"""The assistant's tools in the window, through the real pipeline: the LLM is remote, a
loopback chat server (tests/support/chat_server.py) that answers "set a timer" and "add a
reminder" with the recorded tool-call streams of tests/server/data/; speech is the
bundled offline stack (Silero VAD, faster-whisper tiny.en, Piper). The user types (the
controller's ``say``, what the message box sends) on a pipeline that listens to a silent
source.

- The confirmation dialog (the real one, answered by a QTimer) holds a tool with side
  effects until it is answered; the timer it set is listed, fires (the banner says so, the
  chime reaches the injected sink) and leaves the list. Declined, a tool does nothing.
- Stopping while a question is open declines it; the engine's threads end.
- A reminder still pending is listed again by a new window on the same data folder
  (``PARLEY_DATA_DIR``), and its Cancel removes it from the engine.
- With the bundled SmolLM2 (no tool support) the Settings tab's Tools group says why tools
  are off and which models enable them, its controls disabled.

Screenshots (light and dark): a tool call in the conversation with the timers beside it,
and the Tools settings; ``make screenshots`` writes them to resources/screenshots.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.theme import load_stylesheet
from app.window.main_window import MainWindow
from engine.audio.file_sink import FileSink
from engine.config import EngineConfig
from engine.pipeline.events import TimerDue, ToolCallFinished
from tests.support.chat_server import ChatServer
from tests.support.events import EventRecorder
from tests.support.screenshots import SIZE, screenshot_folder, shoot_light_and_dark
from tests.support.sources import Quiet

SPEECH = {"stt.backend": "faster-whisper", "tts.backend": "piper", "turns.barge_in": "off"}
OFFLINE = {**SPEECH, "llm.backend": "transformers"}
ANSWER_AFTER_MS = 800  # the dialog stays open this long before the QTimer clicks Run


def _window(qtbot, config: EngineConfig, gui_settings) -> MainWindow:
    window = MainWindow(config, gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.resize(*SIZE)
    window.show()
    c = window.controller
    failed: list[str] = []
    c.apply_failed.connect(lambda failure: failed.append(str(failure)))
    c.apply(config)
    qtbot.waitUntil(lambda: bool(failed) or (c.engine is not None and not c.worker.busy), timeout=300_000)
    assert not failed, failed
    return window


def _labels(window: MainWindow) -> list[str]:
    return [label for label, _due, _left in window.tools.timers.rows()]


@pytest.mark.slow
def test_tools_ask_first_list_their_timers_notify_and_survive_a_restart(qtbot, gui_settings, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path / "data"))  # its own timers file
    QApplication.instance().setStyleSheet(load_stylesheet())
    folder = screenshot_folder(tmp_path)
    server = ChatServer()
    try:
        config = EngineConfig().with_overrides(
            {**SPEECH, "llm.backend": "openai", "llm.base_url": server.url, "llm.model": server.model})
        window = _window(qtbot, config, gui_settings)
        c, tools = window.controller, window.tools
        qtbot.waitUntil(lambda: window.panel.tools.available, timeout=30_000)
        assert window.panel.tools.asks["set_timer"].isChecked()  # asks first: not trusted
        events = EventRecorder()
        c.engine.subscribe(events)
        sink = FileSink(None, realtime=False)
        c.start_with([Quiet()], [sink])
        qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)

        # Each dialog is answered by a QTimer, a while after it opened: Run, Don't run, Run.
        # The fourth is left open: Stop answers it.
        dialogs, clicked, answers = [], [], ["run", "decline", "run", None]

        def answer(dialog) -> None:
            dialogs.append((dialog.call.name, dialog.arguments.toPlainText(), dialog.isVisible()))
            choice = answers.pop(0)
            if choice is not None:
                button = dialog.run_button if choice == "run" else dialog.decline_button
                QTimer.singleShot(ANSWER_AFTER_MS,
                                  lambda: (clicked.append(time.perf_counter()), button.click()))

        tools.confirmer.asked.connect(answer)
        # Typed, as the message box sends it (text only); a refusal is kept.
        failures: list[str] = []
        c.say_failed.connect(lambda _text, why: failures.append(why))
        c.say("Please set a timer for my tea.", speak=False)
        qtbot.waitUntil(lambda: bool(dialogs or failures), timeout=60_000)
        assert not failures, failures
        name, arguments, shown = dialogs[0]
        assert shown and name == "set_timer" and '"seconds": 2' in arguments and '"tea"' in arguments
        # Asked, not answered: the tool has not run, and the window goes on (it is the
        # tool worker that waits).
        assert c.engine.timers() == () and not events.of(ToolCallFinished)
        qtbot.waitUntil(lambda: "tea" in _labels(window), timeout=30_000)
        finished = events.of(ToolCallFinished)
        assert finished and finished[0][1].error is None and finished[0][0] > clicked[0]
        assert tools.confirmer.dialogs == []  # answered and closed

        # Due in 2 s: the banner says so, the chime plays, the list lets it go.
        qtbot.waitUntil(lambda: bool(events.of(TimerDue) and tools.notifier.given), timeout=30_000)
        assert "tea" in tools.notifier.given[0]
        assert window.banner.isVisible() and "tea" in window.banner.label.text()
        qtbot.waitUntil(lambda: sink.audio.size >= 0.5 * sink.sample_rate, timeout=10_000)
        assert "tea" not in _labels(window)

        # A reminder two hours out: declined, nothing is set; asked again and run, it is listed.
        c.say("Add a reminder to call the dentist.", speak=False)
        qtbot.waitUntil(lambda: len(events.of(ToolCallFinished)) == 2 or bool(failures), timeout=60_000)
        assert not failures, failures
        declined = events.of(ToolCallFinished)[1][1]
        assert dialogs[1][0] == "set_reminder" and declined.error == "declined by the user"
        assert c.engine.timers() == () and _labels(window) == []
        # The model is told, and answers (the chat server quotes the error).
        qtbot.waitUntil(lambda: any("declined" in reply for _t, _u, reply in window.conversation.turns()),
                        timeout=30_000)
        c.say("Add a reminder to call the dentist.", speak=False)
        qtbot.waitUntil(lambda: "call the dentist" in _labels(window) or bool(failures), timeout=60_000)
        assert not failures, failures
        assert len(dialogs) == 3 and dialogs[2][0] == "set_reminder"
        _due, left = window.tools.timers.rows()[0][1:]
        assert left.startswith(("1:59:", "2:00:")), left
        # The reply made with the tool's output (the chat server quotes it).
        qtbot.waitUntil(lambda: any("dentist" in reply for _t, _u, reply in window.conversation.turns()),
                        timeout=30_000)
        window.tabs.setCurrentWidget(window.pages["Conversation"])
        # The turn that set the reminder in view: its tool call, then the answer.
        called = window.conversation.item(events.of(ToolCallFinished)[-1][1].turn_id)
        assert called is not None
        qtbot.wait(300)
        window.conversation.ensureWidgetVisible(called)
        shots = shoot_light_and_dark(qtbot, window, folder, "tools_conversation")

        # Stop while a question is open: it is declined, and the engine's threads end.
        c.say("Set a timer again please.", speak=False)
        qtbot.waitUntil(lambda: len(dialogs) == 4 or bool(failures), timeout=60_000)
        engine = c.engine
        c.stop_listening()
        qtbot.waitUntil(lambda: c.state == "ready", timeout=30_000)
        assert tools.confirmer.dialogs == [] and engine.threads_alive() == []
        assert window.banner.messages == tools.notifier.given  # no "did not stop" message
        assert events.of(ToolCallFinished)[-1][1].error == "declined by the user"
        window.close()
        assert window.shutdown_stuck == []
    finally:
        server.close()

    # A new window on the same data folder, with the bundled SmolLM2: the reminder is
    # listed again, and the Tools settings say why the assistant cannot use it.
    window = _window(qtbot, EngineConfig().with_overrides(OFFLINE), gui_settings)
    qtbot.waitUntil(lambda: "call the dentist" in _labels(window), timeout=30_000)
    group = window.panel.tools
    qtbot.waitUntil(lambda: group.support is not None, timeout=30_000)
    assert not group.available
    status = group.status.text()
    assert status.startswith("Tools are off") and status.count("ools are off") == 1, status
    assert "SmolLM2" in status and "Qwen" in status and "llm.backend openai" in status, status
    assert not group.fields["tools.enabled"].isEnabled() and not group.choose.isEnabled()
    assert not group.asks["set_timer"].isEnabled()
    window.tabs.setCurrentWidget(window.pages["Settings"])
    shots += shoot_light_and_dark(qtbot, window, folder, "tools_settings")
    assert all(p.stat().st_size > 20_000 for p in shots)

    # Cancel: off the list at once, off the engine's (and its file) in the background.
    window.tabs.setCurrentWidget(window.pages["Conversation"])
    engine = window.controller.engine
    window.tools.timers.cancel_button(engine.timers()[0].timer_id).click()
    assert _labels(window) == []
    qtbot.waitUntil(lambda: engine.timers() == (), timeout=10_000)
    window.close()
    assert window.shutdown_stuck == []


def test_a_closed_window_declines_the_question_it_was_asking(qtbot, gui_settings):
    """The confirmer alone, on a window with no engine: the question waits on its worker
    thread, and closing the window answers it "don't run"."""
    import threading

    from engine.backends.base import ToolCall
    from engine.tools.registry import ToolInfo

    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: not window.controller.worker.busy, timeout=120_000)
    confirm = window.tools.confirmer
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(confirm(
        ToolCall("call_1", "set_timer", '{"seconds": 60}'),
        ToolInfo("set_timer", "Start a countdown timer.", True, "built-in"))))
    worker.start()
    qtbot.waitUntil(lambda: bool(confirm.dialogs), timeout=10_000)
    assert answers == [] and worker.is_alive()  # waiting for the user
    window.close()
    worker.join(5.0)
    assert answers == [False] and not worker.is_alive()
    # Once closed, nothing is asked any more: declined at once.
    late = threading.Thread(target=lambda: answers.append(confirm(
        ToolCall("call_2", "set_timer", "{}"), ToolInfo("set_timer", "", True, "built-in"))))
    late.start()
    late.join(5.0)
    assert answers == [False, False] and confirm.dialogs == []


def test_ask_before_running_boxes_are_tools_trusted(qtbot, tmp_path):
    """The Tools group with the engine's own list of built-in tools: a box per tool with
    side effects, cleared for a trusted one; clearing a box trusts it (a pending change
    that applies now), and a trusted name without a box (a user tool not loaded) is kept."""
    from app.settings.panel import SettingsPanel
    from engine.tools.builtins import built_in_tools
    from engine.tools.registry import ToolSupport
    from engine.tools.timers import TimerBook

    infos = tuple(t.info for t in built_in_tools(TimerBook(tmp_path / "timers.json"),
                                                 lambda: tmp_path / "history.db").values())
    config = EngineConfig().with_overrides({"tools.trusted": "set_reminder,my_lamp"})
    panel = SettingsPanel(config)
    qtbot.addWidget(panel)
    group = panel.tools
    assert group.status.text() == "The tools are listed once the models are loaded."
    panel.set_tool_support(ToolSupport(True, "", infos))
    assert set(group.asks) == {t.name for t in infos if t.side_effects} >= {"set_timer", "set_reminder"}
    assert group.asks["set_timer"].isChecked() and not group.asks["set_reminder"].isChecked()
    assert "get_time" not in group.asks and group.asks["set_timer"].isEnabled()
    assert panel.pending_changes().empty
    group.asks["set_timer"].setChecked(False)
    assert panel.config_from_widgets().tools.trusted == "set_reminder,my_lamp,set_timer"
    assert panel.pending.text() == "tools.trusted: applies now"
    # Off because the switch is off: the switch stays in reach, the rest waits.
    off = EngineConfig().with_overrides({"tools.enabled": False})
    panel.set_config(off)
    panel.set_tool_support(ToolSupport(False, "tools are off (tools.enabled is false)", infos))
    assert group.status.text() == "Tools are off (tools.enabled is false)"
    assert group.fields["tools.enabled"].isEnabled() and not group.fields["tools.timeout_s"].isEnabled()
    assert not group.asks["set_timer"].isEnabled()


def test_the_timers_list_counts_down_and_says_what_is_due(qtbot):
    """The list as a reading of the engine's timers gives it: soonest first, the time left
    counted down between readings, a fired one gone at once; the notice names a reminder
    as one."""
    from app.tools.timers import Notifier, TimersPanel, left_text
    from app.window.status_line import Banner
    from engine.tools.timers import Timer

    now = time.time()
    tea = Timer("t1", "tea", now + 65.2, "timer")
    dentist = Timer("r1", "call the dentist", now + 7200.2, "reminder")
    panel = TimersPanel()
    qtbot.addWidget(panel)
    assert panel.isHidden()
    panel.show_timers((dentist, tea), now)
    assert [r[0] for r in panel.rows()] == ["tea", "call the dentist"] and not panel.isHidden()
    assert [r[2] for r in panel.rows()] == ["1:06", "2:00:01"]
    panel.tick(now + 6)
    assert panel.rows()[0][2] == "1:00"
    assert panel.kind_of("r1") == "reminder" and panel.kind_of("nope") == "timer"
    banner = Banner()
    qtbot.addWidget(banner)
    notifier = Notifier(banner, panel)
    assert notifier.notify("call the dentist", dentist.due_at, panel.kind_of("r1")).startswith(
        "Reminder: call the dentist (due ")
    panel.forget("t1")
    assert [r[0] for r in panel.rows()] == ["call the dentist"]
    panel.show_timers((dentist, tea), now + 7)  # a reading taken before it fired
    assert [r[0] for r in panel.rows()] == ["call the dentist"]
    panel.show_timers((), now + 8)
    assert panel.rows() == [] and panel.isHidden()
    assert (left_text(now, now), left_text(now + 3 * 86400 + 7200, now)) == ("due", "3 d 2 h")
