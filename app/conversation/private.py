"""A private conversation: File > Private conversation (Ctrl+Shift+N) starts a new
conversation that is not stored in the history, and a strip above the turns says so for
as long as it lasts (its End button, or the menu item again, ends it). The strip also
says when the history is off altogether (Settings > Conversation > History,
``history.enabled``).

Starting or ending one starts the conversation over (``EngineController.new_conversation``):
nothing said before is in a private conversation's context, and nothing said in it goes
into the next stored one. The history recorder of the current engine
(``HistoryRecorder.set_private``) stops storing at once when one starts, and stores again
only once the engine's conversation was reset after it ended (a reply still in flight
is cut off first); a new engine's recorder is told too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

if TYPE_CHECKING:
    from app.core.window_api import WindowApi

PRIVATE_KEY = "Ctrl+Shift+N"
PRIVATE_TEXT = ("Private conversation: nothing of it is stored in the history. End it to "
                "start a new conversation that is stored.")
HISTORY_OFF_TEXT = ("The history is off: conversations are not stored "
                    "(Settings > Conversation > History).")


class PrivateConversation:
    """The Private conversation action and strip of ``window``'s Conversation tab:
    ``action`` (checkable, in the File menu), ``strip`` (placed above the turns by the
    tab), ``active`` (a private conversation is on)."""

    def __init__(self, window: WindowApi, place: Callable[[QFrame], object]) -> None:
        """``place(strip)`` puts the strip above the turns."""
        self._controller = c = window.controller
        self.active = False
        self.action = QAction("Private conversation", window.widget)
        self.action.setObjectName("privateConversationAction")
        self.action.setCheckable(True)
        self.action.setShortcut(QKeySequence(PRIVATE_KEY))
        self.action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.action.setToolTip("Start a conversation that is not stored in the history")
        self.action.toggled.connect(self.set_active)
        window.add_file_action(self.action)
        # Styled as the window's note banner: it must be seen while it is true.
        self.strip = QFrame()
        self.strip.setObjectName("banner")
        self.strip.setProperty("level", "info")
        self.strip.setAccessibleName("Private conversation")
        row = QHBoxLayout(self.strip)
        row.setContentsMargins(14, 6, 8, 6)
        self.label = QLabel()
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        self.end_button = QPushButton("End private conversation")
        self.end_button.setObjectName("bannerButton")
        self.end_button.setAccessibleName("End the private conversation")
        self.end_button.clicked.connect(lambda: self.set_active(False))
        row.addWidget(self.label, 1)
        row.addWidget(self.end_button)
        place(self.strip)
        c.conversation_reset.connect(self._conversation_reset)
        c.engine_changed.connect(lambda _engine: self._tell_recorder())
        c.config_changed.connect(lambda _config: self._show())
        self._show()

    @property
    def history_on(self) -> bool:
        """The applied ``history.enabled``."""
        return bool(self._controller.config.history.enabled)

    def set_active(self, active: bool) -> None:
        """Start (True) or end (False) a private conversation; either starts over."""
        if active == self.active:
            self.action.setChecked(active)
            return
        self.active = active
        self.action.setChecked(active)
        if active:
            self._tell_recorder()  # nothing more is stored from now on
        self._controller.new_conversation()  # stored again after its reset (_conversation_reset)
        self._show()

    def _conversation_reset(self) -> None:
        self._tell_recorder()

    def _tell_recorder(self) -> None:
        recorder = self._controller.history
        if recorder is not None:
            recorder.set_private(self.active)

    def _show(self) -> None:
        if self.active:
            self.label.setText(PRIVATE_TEXT)
        elif not self.history_on:
            self.label.setText(HISTORY_OFF_TEXT)
        self.end_button.setVisible(self.active)
        self.strip.setVisible(self.active or not self.history_on)
