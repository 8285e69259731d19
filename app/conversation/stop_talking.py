"""The "Stop talking" button: shown in the header exactly while Parley's reply is heard;
and ``reply_in_progress``, what the header's Interrupt follows.

Whether a reply plays is read from the snapshot the window's 10 Hz timer already has (no
call into the engine): a turn whose first reply sample was heard, not cut off, and either
still being spoken or finished less than its audio's length ago.
"""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton, QWidget

from engine.measures import Figure, Mark

#: Seconds the button stays after the estimated end of the audio (the sink's buffer).
TAIL_S = 0.3


def playing_turn(snap) -> tuple[int, int] | None:
    """``(unit, turn_id)`` of a reply of the EngineSnapshot ``snap`` being heard, or None."""
    if snap is None:
        return None
    for record in reversed(snap.turns):
        heard = record.marks.get(Mark.AUDIO_OUT_FIRST)
        if heard is None or record.cancelled or Mark.BARGE_IN in record.marks:
            continue
        audio = record.figures.get(Figure.TTS_AUDIO_S)
        if not record.finished or (audio is not None and snap.t < heard + audio + TAIL_S):
            return record.unit, record.turn_id
    return None


def reply_in_progress(snap) -> bool:
    """True while a reply of the EngineSnapshot ``snap`` is being thought (its turn was
    committed, or the LLM started on it early, and it has not ended) or heard."""
    if snap is None:
        return False
    for record in reversed(snap.turns):
        if record.finished or record.cancelled or Mark.BARGE_IN in record.marks:
            continue
        if Mark.COMMITTED in record.marks or Mark.LLM_START in record.marks:
            return True
    return reply_playing(snap)


def reply_playing(snap) -> bool:
    """True while a reply of the EngineSnapshot ``snap`` is being heard."""
    return playing_turn(snap) is not None


class StopTalkingButton(QPushButton):
    """Hidden until a reply plays; a click (or Esc) cuts the reply off through ``interrupt``."""

    def __init__(self, interrupt, parent: QWidget | None = None) -> None:
        super().__init__("Stop talking", parent)
        self.setObjectName("stopTalkingButton")
        self.setAccessibleName("Stop talking")
        self.setToolTip("Parley is speaking: cut the reply off (Esc)")
        self._interrupt = interrupt
        self.turn: tuple[int, int] | None = None  # the reply the button is shown for
        # Replies cut off here: a snapshot taken before the cut must not show it again.
        self._cut: set[tuple[int, int]] = set()
        self.clicked.connect(self.stop)
        self.hide()

    def stop(self) -> None:
        """Interrupt the reply and hide at once."""
        self._interrupt()
        self.forget()

    def update_from(self, snap, listening: bool) -> None:
        """Show or hide for the latest snapshot; never while the engine is idle."""
        turn = playing_turn(snap) if listening else None
        if turn in self._cut:
            turn = None
        self.turn = turn
        if (turn is not None) == self.isHidden():
            self.setVisible(turn is not None)

    def turn_cancelled(self, unit: int, turn_id: int, reason: str) -> None:
        """A barge-in or Interrupt (EventBridge): that reply stops now. A reopened turn
        (the user went on speaking) may still get a new reply under its id."""
        if self.turn == (unit, turn_id):
            self.turn = None
            self.hide()
        if reason != "reopened":
            self._cut.add((unit, turn_id))

    def new_engine(self) -> None:
        """A new engine numbers its turns afresh."""
        self._cut.clear()
        self.turn = None
        self.hide()

    def forget(self) -> None:
        """The reply shown was interrupted (here or by the window's Interrupt): hide, and
        never show it again for a snapshot taken before the cut."""
        if self.turn is not None:
            self._cut.add(self.turn)
            if len(self._cut) > 64:  # only recent turns can reappear in a stale snapshot
                self._cut = {self.turn}
        self.turn = None
        self.hide()
