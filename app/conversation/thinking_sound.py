"""The audible "thinking" cue: a soft two-note chime when the "Thinking…" bubble appears.

Off by default (View > Thinking sound, saved as ``ui/thinking_sound``). The chime plays
on a sink of its own (the configured speaker), never through the pipeline, on the
player's background thread (the voice preview's ``PreviewPlayer``, handed over by the
window): the GUI thread only hands it the samples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from app.core.saved_settings import set_ui_value, ui_value

if TYPE_CHECKING:
    from app.conversation.view import ConversationView
    from app.core.window_api import WindowApi

RATE = 16000
NOTES_HZ = (660.0, 880.0)
NOTE_S = 0.11
LEVEL = 0.08  # about -22 dBFS: heard, never startling


def chime(rate: int = RATE) -> np.ndarray:
    """Two short sine notes with raised-cosine edges (no clicks), float32 mono."""
    n = round(NOTE_S * rate)
    t = np.arange(n) / rate
    edge = round(0.015 * rate)
    envelope = np.ones(n)
    ramp = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, edge))
    envelope[:edge], envelope[-edge:] = ramp, ramp[::-1]
    gap = np.zeros(round(0.04 * rate))
    notes = [LEVEL * envelope * np.sin(2 * np.pi * f * t) for f in NOTES_HZ]
    return np.concatenate([notes[0], gap, notes[1]]).astype(np.float32)


class ChimePlayer(Protocol):
    """Plays a sound in the background (the voice preview's ``PreviewPlayer``)."""

    def play(self, audio: np.ndarray, rate: int) -> None:
        """Play ``audio`` (float32 mono at ``rate``), cutting off any sound playing."""
        ...

    def stop(self, timeout: float = 2.0) -> bool:
        """Cut off the sound and join its thread; True if it ended."""
        ...


class ThinkingSound(QObject):
    """Plays ``chime()`` on ``player`` when ``view`` starts its thinking cue, if on; the
    option is an action in ``window``'s View menu."""

    def __init__(self, window: WindowApi, view: ConversationView, player: ChimePlayer) -> None:
        super().__init__(window.widget)
        self.settings = window.settings
        self.player = player
        self.action = QAction("Thinking sound", self, checkable=True)
        self.action.setObjectName("thinkingSoundAction")
        self.action.setToolTip("A soft chime when the reply has not started a second after "
                               "your turn ended")
        self.action.setChecked(bool(ui_value(self.settings, "thinking_sound", False)))
        self.action.toggled.connect(lambda on: set_ui_value(self.settings, "thinking_sound", on))
        window.menus["view"].addAction(self.action)
        view.thinking_started.connect(self.on_thinking)
        self.played = 0  # chimes started (for the status of a test)

    @property
    def enabled(self) -> bool:
        return self.action.isChecked()

    def on_thinking(self, _turn_id: int) -> None:
        """The cue appeared: chime, if the user asked for it."""
        if self.enabled:
            self.player.play(chime(), RATE)
            self.played += 1

    def stop(self) -> bool:
        """Cut off a chime and join its thread (window close)."""
        return self.player.stop()
