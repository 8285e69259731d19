"""The user turns a realtime session follows: each one's item and what was sent of it.

A session sees a user turn through its unit's events: speech starts (a new turn, or the
same one resumed inside the reopen grace), speech stops at the commit, then the input
transcription. A turn's transcripts may come after the next turn began (the user spoke
again before the STT finished), so the recent turns stay findable by id; the turn the
VAD is in now is ``current``, a fresh ``UserTurn`` at each new turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.server import wire

#: Turns kept findable by id: past this many, only the newest ``_KEEP_AFTER_TRIM`` stay
#: (a turn's transcripts come within a turn or two; this only bounds a long session).
_MAX_RECENT = 64
_KEEP_AFTER_TRIM = 32


@dataclass(slots=True)
class UserTurn:
    """One user turn of a session: its conversation item and the state of its events."""

    turn_id: int
    #: The id of the user item its audio and transcript are in.
    item_id: str
    #: The VAD is in it: speech started and the turn is not committed yet.
    speaking: bool = True
    #: A client's ``input_audio_buffer.clear`` throws it away: it gets no item.
    clearing: bool = False
    #: The input transcription's words sent so far as deltas (deltas only ever append).
    transcript_sent: str = ""


class UserTurns:
    """A session's user turns: ``current`` and the recent ones by id. Event loop only."""

    def __init__(self) -> None:
        self.current: UserTurn | None = None
        self._recent: dict[int, UserTurn] = {}

    def start(self, turn_id: int, *, speaking: bool = True) -> UserTurn:
        """A new turn: a fresh ``UserTurn`` with a new item id, now ``current``.
        ``speaking`` False: the turn was first seen at its commit."""
        turn = self.current = self._recent[turn_id] = UserTurn(turn_id, wire.new_id("item"),
                                                               speaking=speaking)
        if len(self._recent) > _MAX_RECENT:
            for old in sorted(self._recent)[:-_KEEP_AFTER_TRIM]:
                del self._recent[old]
        return turn

    def get(self, turn_id: int) -> UserTurn | None:
        """That turn, if it is a recent one and was not dropped."""
        return self._recent.get(turn_id)

    def drop(self, turn_id: int) -> UserTurn | None:
        """Forget that turn (cleared by the client); returns it, if it was known."""
        return self._recent.pop(turn_id, None)

    @property
    def speaking(self) -> bool:
        """Whether the VAD is in a turn now (speech not committed yet)."""
        return self.current is not None and self.current.speaking
