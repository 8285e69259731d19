"""The push-to-talk key system-wide: held in any application, it opens the microphone.

Where the platform lets an application see keys sent to other windows (X11, Windows,
macOS with the Accessibility permission) a ``pynput`` keyboard listener (the optional
dependency in the ``gui`` extra, imported only when the option is switched on) watches
the talk key. Its callbacks run on pynput's own thread: they only emit a signal, which
Qt queues to the GUI thread, where ``TalkKey.hold`` runs. The listener thread never
touches a widget.

Wayland does not let an application read keys sent to other windows at all; the
compositor's global-shortcuts portal reports activation but not key release, so it cannot
drive hold-to-talk. Without a display (the offscreen platform, a headless session)
there is nothing to listen to. The option is then disabled, and its tooltip says why.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QCheckBox

from app.core.saved_settings import set_ui_value, ui_value

log = logging.getLogger("parley.app")

LABEL = "Push to talk works in other apps too"
WAYLAND_REASON = ("Not available on Wayland: Wayland does not let an application read keys sent "
                  "to other windows (only the compositor's global shortcuts portal, which "
                  "reports no key release, so it cannot hold a talk key).")
NO_DISPLAY_REASON = "Not available without a display (offscreen or headless session)."
NO_PYNPUT_REASON = "Needs the optional package pynput: pip install pynput"
MACOS_NOTE = ("macOS asks for the Accessibility permission the first time (System Settings › "
              "Privacy & Security › Accessibility); without it no key is seen.")
#: The Qt names of the talk keys (the settings panel's choices) as pynput's Key members.
PYNPUT_KEYS = {"Space": "space", "F8": "f8", "F9": "f9", "F10": "f10", "Insert": "insert",
               "Pause": "pause"}


@dataclass(frozen=True)
class Support:
    """Whether a system-wide talk key can work here, and the user-facing reason or note."""

    available: bool
    reason: str


def hotkey_support(env: Mapping[str, str] | None = None, platform: str | None = None,
                   has_pynput: bool | None = None) -> Support:
    """Decide from the environment and platform (defaults: this process's) whether a global
    talk key can work; pure, so the tests can try each platform."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if has_pynput is None:
        has_pynput = importlib.util.find_spec("pynput") is not None
    qpa = env.get("QT_QPA_PLATFORM", "").split(":")[0]
    if qpa in ("offscreen", "minimal", "vnc"):
        return Support(False, NO_DISPLAY_REASON)
    if platform.startswith("win"):
        ok, note = True, "Works system-wide on Windows (not over windows of elevated programs)."
    elif platform == "darwin":
        ok, note = True, MACOS_NOTE
    elif env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE", "").lower() == "wayland" \
            or qpa.startswith("wayland"):
        return Support(False, WAYLAND_REASON)
    elif env.get("DISPLAY"):
        ok, note = True, "Works system-wide on X11."
    else:
        return Support(False, NO_DISPLAY_REASON)
    if not has_pynput:
        return Support(False, NO_PYNPUT_REASON)
    return Support(ok, note)


class GlobalHotkey(QObject):
    """A pynput listener for one talk key; ``talk(bool)`` is emitted on key down / up,
    once per transition (the OS's auto-repeat presses are dropped)."""

    talk = Signal(bool)

    def __init__(self, key: str = "Space", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self._listener = None
        self._down = False

    @property
    def running(self) -> bool:
        """True while the listener runs."""
        return self._listener is not None

    def set_key(self, key: str) -> None:
        """Watch ``key`` (a Qt key name, see PYNPUT_KEYS) from now on."""
        if self._down:
            self._down = False
            self.talk.emit(False)
        self.key = key

    def start(self) -> str | None:
        """Start listening; None, or why it could not start."""
        if self._listener is not None:
            return None
        try:
            from pynput import keyboard  # optional, and slow to import: only when used

            listener = keyboard.Listener(on_press=self.on_press, on_release=self.on_release)
            listener.daemon = True
            listener.start()
        except Exception as exc:  # noqa: BLE001 - any backend failure means "unavailable"
            log.warning("global push-to-talk key unavailable: %s", exc)
            return f"The system-wide talk key could not start: {exc}"
        self._listener = listener
        return None

    def stop(self) -> None:
        """Stop listening (idempotent); a held key counts as released."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        if self._down:
            self._down = False
            self.talk.emit(False)

    # ------------------------------------------------------------------ listener thread
    def matches(self, key) -> bool:
        """True when the pynput ``key`` (a Key member or a KeyCode) is the talk key.

        Compared by name, not by importing pynput here: pynput's Key members carry the
        key's name (``Key.f8.name == "f8"``), a KeyCode its character.
        """
        name = PYNPUT_KEYS.get(self.key, self.key.lower())
        if getattr(key, "name", None) == name:
            return True
        return name == "space" and getattr(key, "char", None) == " "

    def on_press(self, key) -> None:
        """pynput's press callback (its thread): emit only, never touch a widget."""
        if not self._down and self.matches(key):
            self._down = True
            self.talk.emit(True)

    def on_release(self, key) -> None:
        """pynput's release callback (its thread)."""
        if self._down and self.matches(key):
            self._down = False
            self.talk.emit(False)


class GlobalPushToTalk(QObject):
    """The header's "works in other apps too" option of the window's ``TalkKey``: its
    checkbox (saved as ``ui/global_ptt``), and the listener, running while the option and
    push-to-talk are on."""

    def __init__(self, talk_key, support: Support | None = None) -> None:
        super().__init__(talk_key)
        self.talk_key = talk_key
        self.support = support or hotkey_support()
        self.hotkey = GlobalHotkey(talk_key.key, self)
        # Queued even when emitted on the GUI thread: hold() always runs from the event loop.
        self.hotkey.talk.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        check = self.check = QCheckBox("In other apps too")
        check.setObjectName("globalPttCheck")
        check.setAccessibleName(LABEL)
        check.setEnabled(self.support.available)
        check.setToolTip(f"{LABEL}: the talk key is seen while another application has the "
                         f"keyboard. {self.support.reason}" if self.support.available
                         else f"{LABEL}. {self.support.reason}")
        check.setChecked(self.support.available and ui_value(talk_key.settings, "global_ptt", False))
        check.toggled.connect(self._toggled)
        talk_key.check.toggled.connect(lambda _on: self.sync())
        talk_key.key_changed.connect(self.hotkey.set_key)
        self.sync()

    def _deliver(self, pressed: bool) -> None:
        """The key went down or up in some application (GUI thread). While Parley's window
        is active its own key filter decides (it skips text fields, where a space is
        typed); a release always counts, so the microphone never stays open."""
        if pressed and self.talk_key.window.isActiveWindow():
            return
        self.talk_key.hold(pressed)

    def _toggled(self, on: bool) -> None:
        set_ui_value(self.talk_key.settings, "global_ptt", on)
        self.sync()

    def sync(self) -> None:
        """Run the listener exactly while push-to-talk and this option are both on."""
        ptt = self.talk_key.check.isChecked()
        self.check.setVisible(ptt)
        if ptt and self.check.isChecked() and self.support.available:
            problem = self.hotkey.start()
            if problem is not None:
                self.check.setChecked(False)
                self.check.setToolTip(f"{LABEL}. {problem}")
        else:
            self.hotkey.stop()
