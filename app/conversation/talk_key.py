"""Push-to-talk in the header: the option, the Hold to talk button and the talk key.

While the option is on, the microphone passes only while the talk key (``ui/ptt_key``,
chosen on the Settings tab) or the button is held. The key is watched application-wide
by an event filter installed only while the option is on (a Python event filter sees
every event, and each one costs the GIL); text fields keep their keys. Where the
platform allows, ``GlobalPushToTalk`` watches the same key in other applications.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QCheckBox, QLineEdit, QPlainTextEdit, QPushButton

from app.conversation.global_hotkey import GlobalPushToTalk
from app.core.saved_settings import set_ui_value, ui_value
from app.core.widgets import application

if TYPE_CHECKING:
    from app.core.window_api import WindowApi


class TalkKey(QObject):
    """The push-to-talk controls of ``window`` (added to its header) and the key filter."""

    key_changed = Signal(str)  # the talk key's Qt name ("Space", "F8", …)

    def __init__(self, window: WindowApi) -> None:
        super().__init__(window.widget)
        self.window = window.widget  # whose focus and deactivation the key filter watches
        self.controller = window.controller
        self.settings = window.settings
        self.key: str = ui_value(self.settings, "ptt_key", "Space")
        self._filtering = False  # the key filter is installed
        self.check = QCheckBox("Push to talk")
        self.check.setToolTip("Only listen while the talk key (or the Hold to talk button) is held")
        self.button = QPushButton("Hold to talk")
        self.button.setObjectName("talkButton")
        self.button.pressed.connect(lambda: self.hold(True))
        self.button.released.connect(lambda: self.hold(False))
        self.global_ptt = GlobalPushToTalk(self)
        # In the header before anything is shown or hidden: a widget without a parent
        # would open as a window of its own.
        window.add_header_widget(self.check, space_before=12)
        window.add_header_widget(self.button)
        window.add_header_widget(self.global_ptt.check)
        self.check.toggled.connect(self._toggled)
        self.check.setChecked(ui_value(self.settings, "push_to_talk", False))
        self._toggled(self.check.isChecked())
        window.on_close(self.close)

    def set_key(self, key: str) -> None:
        """Hold ``key`` (a Qt key name) to talk from now on; saved as ``ui/ptt_key``."""
        self.key = key
        self.button.setText(f"Hold to talk ({key})")
        set_ui_value(self.settings, "ptt_key", key)
        self.key_changed.emit(key)

    def hold(self, pressed: bool) -> None:
        """The talk key (or button) went down or up: the microphone passes while held."""
        self.controller.set_talking(pressed)
        self.button.setProperty("talking", pressed)
        self.button.style().unpolish(self.button)
        self.button.style().polish(self.button)

    def _toggled(self, enabled: bool) -> None:
        if enabled != self._filtering:
            app = application()
            (app.installEventFilter if enabled else app.removeEventFilter)(self)
            self._filtering = enabled
        self.controller.set_push_to_talk(enabled)
        self.button.setVisible(enabled)
        self.button.setText(f"Hold to talk ({self.key})")
        set_ui_value(self.settings, "push_to_talk", enabled)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """The talk key, held anywhere in the window except in text fields."""
        kind = event.type()
        if kind in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease) and isinstance(event, QKeyEvent) \
                and self.check.isChecked() and not event.isAutoRepeat() and self.window.isActiveWindow() \
                and QKeySequence(event.key()).toString() == self.key \
                and not isinstance(QApplication.focusWidget(), (QLineEdit, QPlainTextEdit)):
            self.hold(kind == QEvent.Type.KeyPress)
            return True
        if kind == QEvent.Type.WindowDeactivate and obj is self.window and self.controller.talking:
            self.hold(False)  # a key released outside the window never arrives
        return False

    def close(self) -> None:
        """The window closes: no key filter, no listener (a held key counts as released)."""
        if self._filtering:
            application().removeEventFilter(self)
            self._filtering = False
        self.global_ptt.hotkey.stop()
