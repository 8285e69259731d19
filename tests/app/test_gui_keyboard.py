"""Keyboard: every control of the main window and its tabs has an accessible name and can
be reached with Tab (in a sensible order), and each shortcut does what it says."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QApplication, QComboBox,
                               QHeaderView, QLineEdit, QMenuBar, QPlainTextEdit, QSlider, QTabBar, QTextEdit,
                               QWidget)

from app.core.controller import ControllerMode, ControllerState
from app.window.main_window import MainWindow
from engine.config import EngineConfig


# Listed here, not imported from app.window.accessibility: the test states what "interactive" means.
INTERACTIVE = (QAbstractButton, QComboBox, QLineEdit, QAbstractSpinBox, QPlainTextEdit, QTextEdit,
               QSlider, QTabBar, QAbstractItemView)


@pytest.fixture
def window(qtbot, gui_settings):
    w = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(w)
    w.show()
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5000)
    yield w
    w.controller.engine = None
    w.controller.mode = ControllerMode.IDLE
    w.close()


def _controls(window: QWidget) -> list[QWidget]:
    out = []
    for w in window.findChildren(QWidget):
        if not isinstance(w, INTERACTIVE) or isinstance(w, QHeaderView) or w.window() is not window:
            continue
        # Parts Qt builds inside one control: a spin box's editor, a combo box's list, a tab
        # bar's scroll arrows, a table's corner button, the menu bar's overflow arrow.
        if isinstance(w.parentWidget(), (QAbstractSpinBox, QComboBox, QTabBar, QAbstractItemView,
                                         QMenuBar)):
            continue
        out.append(w)
    return out


def test_every_control_has_a_name_and_takes_tab_focus(window):
    # Every tab shown once: rows made when a tab is first shown are covered too.
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
    controls = _controls(window)
    assert len(controls) > 60  # the settings panel's editors are in
    kinds = {type(w).__name__ for w in controls}
    assert {"QPushButton", "QComboBox", "QCheckBox", "QSpinBox", "QLineEdit", "QTabBar"} <= kinds
    unnamed = [f"{type(w).__name__} {w.objectName()!r}" for w in controls if not w.accessibleName().strip()]
    assert not unnamed
    no_tab = [f"{type(w).__name__} {w.accessibleName()!r}" for w in controls
              if not w.focusPolicy() & Qt.FocusPolicy.TabFocus]
    assert not no_tab


def test_settings_editors_are_named_by_their_labels(window):
    from app.settings.fields import field_label

    panel = window.panel
    for dotted, editor in panel.fields.items():
        assert editor.accessibleName(), dotted
    advanced = [d for d in panel.fields if d.startswith("llm.")]
    assert advanced and all(panel.fields[d].accessibleName() == field_label(d) for d in advanced
                            if d not in ("turns.barge_in",))
    assert panel.ptt_key.accessibleName() == "Push-to-talk key"
    assert panel.backend["stt"].accessibleName() == "Speech to text backend"


def test_tab_order_of_the_header(window, qtbot):
    window.listen_button.setEnabled(True)
    window.interrupt_button.setEnabled(True)
    window.talk_key.check.setChecked(True)
    window.listen_button.setFocus(Qt.FocusReason.TabFocusReason)
    order = [QApplication.focusWidget()]
    for _ in range(3):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        order.append(QApplication.focusWidget())
    # The hidden Stop talking button is skipped; then push-to-talk and its talk button.
    talk = window.talk_key
    assert order == [window.listen_button, window.interrupt_button, talk.check, talk.button]


def _fake_engine(window):
    calls = []

    class Engine:
        def interrupt(self):
            calls.append("interrupt")

        def __getattr__(self, _name):  # stop, release_models…: nothing to do, nothing stuck
            return lambda *_a, **_k: []

    window.controller.engine = Engine()
    window._state_changed(ControllerState.READY)
    return calls


def test_ctrl_l_starts_and_stops_listening(window, qtbot, monkeypatch):
    _fake_engine(window)
    calls = []
    monkeypatch.setattr(window.controller, "start_listening", lambda: calls.append("start"))
    monkeypatch.setattr(window.controller, "stop_listening", lambda: calls.append("stop"))
    assert window.listen_action.isEnabled()
    qtbot.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert calls == ["start"]
    window.controller.mode = ControllerMode.MIC
    qtbot.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert calls == ["start", "stop"]


def test_escape_interrupts_the_reply(window, qtbot):
    calls = _fake_engine(window)
    window.controller.mode = ControllerMode.MIC
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert calls == ["interrupt"]


def test_ctrl_comma_opens_settings_with_focus_in_it(window, qtbot):
    assert window.tabs.currentWidget() is window.pages["Conversation"]
    qtbot.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.pages["Settings"]
    assert window.findChild(QAction, "settingsAction").shortcut().toString() == "Ctrl+,"
    focus = QApplication.focusWidget()
    assert focus is not None and window.panel.isAncestorOf(focus)


def test_ctrl_number_switches_tabs(window, qtbot):
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.pages["Server"]
    qtbot.keyClick(window, Qt.Key.Key_1, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.pages["Conversation"]


def test_push_to_talk_key_holds_the_microphone_open(window, qtbot):
    window.talk_key.check.setChecked(True)
    window.panel.ptt_key.setCurrentText("F9")
    qtbot.keyPress(window.conversation, Qt.Key.Key_F9)
    assert window.talk_key.button.property("talking") is True
    qtbot.keyRelease(window.conversation, Qt.Key.Key_F9)
    assert window.talk_key.button.property("talking") is False
