"""The system-wide push-to-talk key: where it can work (per platform and session), and that
keys seen by the pynput listener drive the talk button on the GUI thread."""

from __future__ import annotations

import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QThread
from PySide6.QtWidgets import QApplication, QWidget

from app.conversation import global_hotkey
from app.conversation.global_hotkey import (MACOS_NOTE, NO_DISPLAY_REASON, NO_PYNPUT_REASON, WAYLAND_REASON,
                                            GlobalHotkey, GlobalPushToTalk, Support, hotkey_support)
from app.window.main_window import MainWindow
from engine.config import EngineConfig



def _keys():
    """pynput's keyboard module; where it cannot load (pynput not installed, or on Linux
    without an X display, as in a headless test run) stand-ins with the same attributes
    the listener reads: a Key member's ``name``, a KeyCode's ``char``."""
    try:
        from pynput import keyboard

        return keyboard
    except ImportError:  # no X display: pynput's backend fails at import
        import enum
        from types import SimpleNamespace

        key = enum.Enum("Key", {n: i for i, n in enumerate(("space", "f8", "f9", "f10", "insert", "pause"))})

        class KeyCode:
            def __init__(self, char=None):
                self.char = char

            @classmethod
            def from_char(cls, char):
                return cls(char)

        return SimpleNamespace(Key=key, KeyCode=KeyCode)


keyboard = _keys()


@pytest.mark.parametrize(("env", "platform", "available", "reason"), [
    ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, "linux", True, "X11"),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, "linux", False, WAYLAND_REASON),
    ({"XDG_SESSION_TYPE": "wayland", "DISPLAY": ":0"}, "linux", False, WAYLAND_REASON),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland"}, "linux", False, WAYLAND_REASON),
    ({}, "linux", False, NO_DISPLAY_REASON),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux", False, NO_DISPLAY_REASON),
    ({}, "win32", True, "Windows"),
    ({}, "darwin", True, MACOS_NOTE),
    ({"QT_QPA_PLATFORM": "offscreen"}, "darwin", False, NO_DISPLAY_REASON),
])
def test_where_a_global_talk_key_can_work(env, platform, available, reason):
    support = hotkey_support(env, platform, has_pynput=True)
    assert support.available is available
    assert reason in support.reason


def test_without_pynput_the_reason_says_how_to_get_it():
    support = hotkey_support({"DISPLAY": ":0"}, "linux", has_pynput=False)
    assert support == Support(False, NO_PYNPUT_REASON)
    # Wayland's reason wins: installing pynput would not help there.
    assert hotkey_support({"WAYLAND_DISPLAY": "w"}, "linux", has_pynput=False).reason == WAYLAND_REASON


def test_this_process_uses_its_environment(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert hotkey_support().reason == NO_DISPLAY_REASON


def test_the_listener_matches_the_talk_key_and_drops_auto_repeat(qtbot):
    hotkey = GlobalHotkey("F8")
    seen = []
    hotkey.talk.connect(seen.append)
    hotkey.on_press(keyboard.Key.f9)
    hotkey.on_press(keyboard.Key.f8)
    hotkey.on_press(keyboard.Key.f8)  # the OS repeats a held key
    hotkey.on_release(keyboard.KeyCode.from_char("a"))
    hotkey.on_release(keyboard.Key.f8)
    assert seen == [True, False]
    hotkey.set_key("Space")
    hotkey.on_press(keyboard.KeyCode.from_char(" "))
    hotkey.on_release(keyboard.Key.space)
    assert seen == [True, False, True, False]


@pytest.fixture
def window(qtbot, gui_settings):
    w = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()


def test_offscreen_the_option_is_disabled_and_says_why(window):
    check = window.talk_key.global_ptt.check
    assert not check.isEnabled()
    assert NO_DISPLAY_REASON in check.toolTip()
    assert check.accessibleName() == global_hotkey.LABEL
    assert check.isHidden()  # only with push-to-talk on
    window.talk_key.check.setChecked(True)
    assert not check.isHidden()
    assert not window.talk_key.global_ptt.hotkey.running


def test_keys_from_the_listener_thread_toggle_talking_on_the_gui_thread(window, qtbot, monkeypatch):
    window.talk_key.check.setChecked(True)
    talks = []
    real_talk = window.talk_key.hold

    def talk(pressed):  # record where _talk runs
        talks.append((pressed, QThread.currentThread() is QApplication.instance().thread()))
        real_talk(pressed)

    monkeypatch.setattr(window.talk_key, "hold", talk)
    # An option made for a platform that allows it; start() not called (no real listener).
    option = GlobalPushToTalk(window.talk_key, Support(True, "test"))
    hotkey = option.hotkey
    hotkey.set_key(window.talk_key.key)
    other = QWidget()  # another application's window has the keyboard
    qtbot.addWidget(other)
    other.show()
    other.activateWindow()
    qtbot.waitUntil(lambda: not window.isActiveWindow(), timeout=5000)
    thread = threading.Thread(target=hotkey.on_press, args=(keyboard.Key.space,))
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: window.talk_key.button.property("talking") is True, timeout=2000)
    hotkey.on_release(keyboard.Key.space)  # even from the GUI thread: queued, not direct
    assert window.talk_key.button.property("talking") is True
    qtbot.waitUntil(lambda: window.talk_key.button.property("talking") is False, timeout=2000)
    assert talks == [(True, True), (False, True)]


def test_the_option_starts_and_stops_the_listener_with_push_to_talk(window, monkeypatch, gui_settings):
    started, stopped = [], []
    option = GlobalPushToTalk(window.talk_key, Support(True, "test"))
    monkeypatch.setattr(option.hotkey, "start", lambda: started.append(1))
    monkeypatch.setattr(option.hotkey, "stop", lambda: stopped.append(1))
    assert option.check.isEnabled()
    window.talk_key.check.setChecked(True)
    option.check.setChecked(True)
    assert started and gui_settings.value("ui/global_ptt") in (True, "true")
    window.talk_key.check.setChecked(False)
    assert stopped


def test_while_parley_is_active_its_own_key_filter_decides(window, qtbot):
    window.talk_key.check.setChecked(True)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    option = GlobalPushToTalk(window.talk_key, Support(True, "test"))
    option.hotkey.on_press(keyboard.Key.space)  # e.g. a space typed in a text field
    qtbot.wait(50)
    assert window.talk_key.button.property("talking") is not True
    window.talk_key.hold(True)
    option.hotkey.on_release(keyboard.Key.space)  # a release always closes the microphone
    qtbot.waitUntil(lambda: window.talk_key.button.property("talking") is False, timeout=2000)
