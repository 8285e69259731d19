"""The Assistant tab with real widgets on a real loaded offline engine (Silero VAD,
faster-whisper tiny.en, SmolLM2-135M via transformers, the bundled Piper voice): voice
preview, presets and speed applied in place, New conversation (Ctrl+N), accessibility.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractButton, QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox,
                               QLineEdit, QPlainTextEdit, QWidget)

from app.assistant.panel import install
from app.assistant.presets import PRESETS
from app.window.main_window import MainWindow
from engine.audio.file_sink import FileSink
from engine.config import STAGES, EngineConfig
from tests.support.audio import rms
from tests.support.sources import Quiet

OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "off", "turns.speculative": "false", "llm.max_new_tokens": 24}
INTERACTIVE = (QAbstractButton, QComboBox, QAbstractSpinBox, QAbstractSlider, QLineEdit,
               QPlainTextEdit)




@pytest.fixture
def window(qtbot, gui_settings):
    """A window with the Assistant tab installed, its engine loaded and running (typed
    turns only): (window, panel)."""
    config = EngineConfig().with_overrides(OFFLINE)
    window = MainWindow(config, gui_settings, autoload=False)
    panel = install(window)
    qtbot.addWidget(window)
    window.show()
    c = window.controller
    qtbot.waitUntil(lambda: not c.worker.busy, timeout=120_000)  # device discovery
    with qtbot.waitSignal(c.engine_changed, timeout=600_000):
        c.apply(config)
    c.start_with([Quiet()], [FileSink(None, realtime=False)])
    qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)
    qtbot.waitUntil(lambda: panel.voice_combo.count() > 0, timeout=30_000)
    yield window, panel
    window.close()


def _prompts(unit) -> list[list[dict]]:
    """Record the messages of every LLM prompt of ``unit`` from now on."""
    session, seen = unit.llm.session, []
    generate = session.generate

    def recording(messages, options, should_stop):
        seen.append(messages)
        return generate(messages, options, should_stop)

    session.generate = recording  # the LLM stage calls the instance's attribute
    return seen


def test_install_is_idempotent_and_adds_the_tab_and_the_action(window):
    win, panel = window
    assert install(win) is panel
    tabs = [win.tabs.tabText(i) for i in range(win.tabs.count())]
    assert tabs.count("Assistant") == 1
    actions = [a for a in win.menus["file"].actions() if a.text() == "New conversation"]
    assert len(actions) == 1 and actions[0].shortcut().toString() == "Ctrl+N"


def test_the_voice_preview_plays_audio_of_the_chosen_voice(window, qtbot):
    _win, panel = window
    assert [panel.voice_combo.itemData(i) for i in range(panel.voice_combo.count())] == ["auto"]
    assert "en_US-joe-medium" in panel.voice_combo.currentText()
    assert "single speaker" in panel.voice_note.text()
    sink = FileSink(None, realtime=False)
    panel.sink_factory = lambda: sink
    with qtbot.waitSignal(panel.preview_audio, timeout=60_000) as got:
        qtbot.mouseClick(panel.preview_button, Qt.MouseButton.LeftButton)
    audio, rate = got.args
    assert rate == 22050 and audio.dtype == np.float32
    assert audio.size > rate // 2 and rms(audio) > 0.01
    qtbot.waitUntil(lambda: not panel.player.playing, timeout=10_000)
    assert sink.audio.size >= audio.size * sink.sample_rate // rate - 1  # all of it played
    assert panel.preview_button.isEnabled() and "Preview" in panel.message.text()


def test_a_preset_and_the_speed_apply_in_place_and_the_next_reply_uses_them(window, qtbot,
                                                                         gui_settings):
    win, panel = window
    c = win.controller
    engine = c.engine
    unit = engine.units[0]
    models = dict(engine.models)
    llm_model, session = unit.llm.model, unit.llm.session
    prompts = _prompts(unit)
    index = panel.preset_combo.findText("Tutor")
    panel.preset_combo.setCurrentIndex(index)
    with qtbot.waitSignal(c.applied, timeout=60_000) as applied:
        panel.preset_combo.activated.emit(index)  # what choosing it with the mouse sends
    assert applied.args[0].reload_stages == ()
    assert engine.config.llm.system_prompt == PRESETS["Tutor"] == unit.config.llm.system_prompt
    assert panel.prompt_edit.toPlainText() == PRESETS["Tutor"]
    assert engine.models == models and unit.llm.model is llm_model and unit.llm.session is session
    assert all(c.registry.load_count(s) == 1 for s in STAGES)  # nothing reloaded
    assert gui_settings.value("llm/system_prompt") == PRESETS["Tutor"]  # saved once applied
    assert gui_settings.value("ui/assistant/preset") == "Tutor"
    # The speed: the spin box applies once the user paused, in place.
    with qtbot.waitSignal(c.applied, timeout=60_000):
        panel.speed_spin.setValue(1.5)
    assert engine.config.tts.speed == 1.5 == unit.config.tts.speed
    assert panel.speed_slider.value() == 150 and engine.models == models
    assert gui_settings.value("tts/speed") == "1.5"
    # The next reply is prompted with the new system prompt.
    turn = unit.say("Hello there.")
    qtbot.waitUntil(lambda: (r := engine.metrics.turn(0, turn)) is not None and r.finished,
                    timeout=120_000)
    assert prompts and prompts[-1][0] == {"role": "system", "content": PRESETS["Tutor"]}
    # An edited prompt applies with "Use this prompt"; saved as the user's own preset.
    panel.prompt_edit.setPlainText("You are a pirate. Answer in one sentence.")
    panel.preset_name.setText("Pirate")
    panel.save_preset_button.click()
    assert panel.preset_combo.currentText() == "Pirate"
    with qtbot.waitSignal(c.applied, timeout=60_000):
        panel.use_button.click()
    assert engine.config.llm.system_prompt == "You are a pirate. Answer in one sentence."
    assert unit.llm.model is llm_model


def test_ctrl_n_starts_a_new_conversation(window, qtbot):
    win, _panel = window
    c = win.controller
    engine = c.engine
    unit = engine.units[0]
    session = unit.llm.session
    turn = unit.say("What is the capital of France?")
    qtbot.waitUntil(lambda: (r := engine.metrics.turn(0, turn)) is not None and r.finished,
                    timeout=120_000)
    qtbot.waitUntil(lambda: bool(win.conversation.turns()), timeout=10_000)
    assert unit.chat_history.exchanges() and session._cached_ids
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5_000)
    with qtbot.waitSignal(c.conversation_reset, timeout=30_000):
        qtbot.keyClick(win, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert unit.chat_history.exchanges() == ()
    assert unit.llm.session is session and session._cache is None and session._cached_ids == []
    assert win.conversation.turns() == []
    # The conversation goes on from scratch.
    turn = unit.say("What is the capital of Italy?")
    qtbot.waitUntil(lambda: (r := engine.metrics.turn(0, turn)) is not None and r.finished,
                    timeout=120_000)
    assert [e.user for e in unit.chat_history.exchanges()] == ["What is the capital of Italy?"]


def test_every_widget_has_an_accessible_name_and_a_tab_stop(qtbot, gui_settings):
    window = MainWindow(EngineConfig().with_overrides(OFFLINE), gui_settings, autoload=False)
    panel = install(window)
    qtbot.addWidget(window)
    window.show()
    window.tabs.setCurrentWidget(window.pages["Assistant"])
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    widgets = [w for w in panel.findChildren(QWidget)
               if isinstance(w, INTERACTIVE) and w.isVisibleTo(panel)
               and w.parent() is not None and not isinstance(w.parent(), INTERACTIVE)]
    assert len(widgets) >= 11
    for widget in widgets:
        assert widget.accessibleName(), widget
        assert widget.focusPolicy() & Qt.FocusPolicy.TabFocus, widget.accessibleName()
    # Tab walks through every one of them (enabled ones: Delete preset is off for built-ins).
    panel.voice_combo.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is panel.voice_combo, timeout=5_000)
    reached = set()
    for _ in range(60):
        reached.add(QApplication.focusWidget())
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
    missing = [w.accessibleName() for w in widgets if w.isEnabled() and w not in reached]
    assert missing == []
    window.close()
