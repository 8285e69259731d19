"""Every user turn of a Realtime connection, followed from the wire, and how each ended.

A ``TurnLedger`` is the ``TurnTracker`` of a benchmark client (``engine.bench.clients``)
that also keeps, per user item, what the server said of it: ``speech_started``,
``input_audio_buffer.committed``, the input transcription (``completed`` or ``failed``)
and the response Parley made for it (the ``response.created`` that follows the commit:
Parley answers every committed turn and creates that response in the same burst), with
its ``response.done`` status and reason. The client adds what it did itself (``drop``:
it closed the socket on purpose), so every committed turn ends in one class:

- ``answered``: transcribed, and its response completed.
- ``barge_in``: transcribed, and its response cancelled (``turn_detected``) because the
  user spoke again: a later item's ``speech_started`` came after this commit and no
  later than ``BARGE_IN_WINDOW_S`` after the cancel (Parley sends the cancel just before
  the new turn's ``speech_started``).
- ``dropped``: the client closed the connection before the turn was answered.
- ``lost``: anything else; ``why`` says what: never transcribed (a cut reply is on
  purpose, the user's words are not dropped on purpose), cancelled with no barge-in,
  failed, or never answered.

No network here: it is fed made-up events in the tests.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine.bench.clients import TurnTracker

OUTCOMES = ("answered", "barge_in", "dropped", "lost")
BARGE_IN_WINDOW_S = 1.0  # a barge-in's speech_started follows its cancel in the same burst


@dataclass
class UserTurn:
    """One user item as the server reported it (times on the client's clock)."""

    item_id: str
    speech_started_t: float | None = None
    committed_t: float | None = None
    transcript: str | None = None
    transcription_failed: bool = False
    response_id: str | None = None


@dataclass(frozen=True)
class TurnOutcome:
    """How one committed turn ended."""

    item_id: str
    outcome: str  # one of OUTCOMES
    why: str  # for ``lost`` (and a word for the others)
    transcript: str | None
    response_status: str | None
    response_reason: str | None
    ended_after_s: float | None = None  # from the commit to its response.done
    next_speech_after_s: float | None = None  # from the commit to the next speech_started

    def as_dict(self) -> dict:
        return {"item_id": self.item_id, "outcome": self.outcome, "why": self.why,
                "transcript": self.transcript, "response_status": self.response_status,
                "response_reason": self.response_reason,
                "ended_after_s": _round(self.ended_after_s),
                "next_speech_after_s": _round(self.next_speech_after_s)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class TurnLedger(TurnTracker):
    """A ``TurnTracker`` that also follows every user item; see the module doc."""

    items: dict[str, UserTurn] = field(default_factory=dict)  # in the order first heard of
    dropped_t: float | None = None  # the client closed the socket on purpose then
    _awaiting_response: list[str] = field(default_factory=list)  # committed, no response yet

    def _item(self, item_id: str) -> UserTurn:
        if item_id not in self.items:
            self.items[item_id] = UserTurn(item_id)
        return self.items[item_id]

    def feed(self, t: float, event: dict) -> None:
        super().feed(t, event)
        kind = event.get("type")
        item_id = event.get("item_id")
        if kind == "input_audio_buffer.speech_started" and isinstance(item_id, str):
            turn = self._item(item_id)
            turn.speech_started_t = turn.speech_started_t or t
        elif kind == "input_audio_buffer.committed" and isinstance(item_id, str):
            turn = self._item(item_id)
            turn.committed_t = t
            self._awaiting_response.append(item_id)
        elif kind == "conversation.item.input_audio_transcription.completed" and isinstance(item_id, str):
            self._item(item_id).transcript = str(event.get("transcript", ""))
        elif kind == "conversation.item.input_audio_transcription.failed" and isinstance(item_id, str):
            self._item(item_id).transcription_failed = True
        elif kind == "response.created" and self._awaiting_response:
            response_id = (event.get("response") or {}).get("id")
            if isinstance(response_id, str):
                self.items[self._awaiting_response.pop(0)].response_id = response_id

    def note_drop(self, t: float) -> None:
        """The client closes the connection now, on purpose."""
        self.dropped_t = t

    def committed(self) -> list[UserTurn]:
        return [turn for turn in self.items.values() if turn.committed_t is not None]

    def settled(self) -> bool:
        """Every committed turn has its transcript and its response is done."""
        for turn in self.committed():
            response = self.responses.get(turn.response_id or "")
            if response is None or response.done_t is None:
                return False
            if turn.transcript is None and not turn.transcription_failed:
                return False
        return True

    def answered_after(self, t: float) -> bool:
        """A turn committed after ``t`` has a response whose audio started."""
        for turn in self.committed():
            response = self.responses.get(turn.response_id or "")
            if turn.committed_t is not None and turn.committed_t >= t and response is not None \
                    and response.first_audio_t is not None:
                return True
        return False

    def _barged_in(self, turn: UserTurn, done_t: float) -> bool:
        assert turn.committed_t is not None
        return any(other.item_id != turn.item_id and other.speech_started_t is not None
                   and turn.committed_t <= other.speech_started_t <= done_t + BARGE_IN_WINDOW_S
                   for other in self.items.values())

    def outcome(self, turn: UserTurn) -> TurnOutcome:
        """How ``turn`` (a committed one) ended, as things stand."""
        response = self.responses.get(turn.response_id or "")
        status = response.status if response is not None else None
        reason = response.reason if response is not None else None
        done_t = response.done_t if response is not None else None

        committed_t = turn.committed_t or 0.0
        later = [other.speech_started_t - committed_t for other in self.items.values()
                 if other.speech_started_t is not None and other.speech_started_t >= committed_t]

        def result(outcome: str, why: str) -> TurnOutcome:
            return TurnOutcome(turn.item_id, outcome, why, turn.transcript, status, reason,
                               None if done_t is None else done_t - committed_t,
                               min(later) if later else None)

        dropped = self.dropped_t is not None
        if done_t is None or status is None:
            if dropped:
                return result("dropped", "the client left before it was answered")
            return result("lost", "never answered" if response is None or response.created_t is None
                          else "its response never ended")
        transcribed = turn.transcript is not None
        if status == "completed":
            if transcribed:
                return result("answered", "answered")
            if dropped:
                return result("dropped", "the client left before its transcript came")
            return result("lost", "answered but never transcribed")
        if status == "cancelled" and reason == "turn_detected" and self._barged_in(turn, done_t):
            if transcribed:
                return result("barge_in", "its reply was cut by the user's next turn")
            if dropped:
                return result("dropped", "cut by a barge-in; the client left before its transcript")
            return result("lost", "cut by a barge-in before it was transcribed: the user's words "
                                  "never came back")
        if status == "cancelled" and reason == "client_cancelled":
            return result("barge_in" if transcribed else "lost",
                          "cancelled by the client" if transcribed
                          else "cancelled by the client and never transcribed")
        if dropped and status == "cancelled":
            return result("dropped", "cancelled as the client left")
        return result("lost", f"{status} ({reason or 'no reason'}) with no barge-in or client action"
                      + ("" if transcribed else ", never transcribed"))

    def outcomes(self) -> list[TurnOutcome]:
        """Every committed turn's outcome, in commit order."""
        return [self.outcome(turn) for turn in sorted(self.committed(), key=lambda u: u.committed_t or 0)]


def tally(outcomes: list[TurnOutcome]) -> dict:
    """Counts per class, the reasons of the lost ones, and those lost turns."""
    counts = Counter(o.outcome for o in outcomes)
    lost = [o for o in outcomes if o.outcome == "lost"]
    return {"turns": len(outcomes), **{name: counts[name] for name in OUTCOMES},
            "lost_why": dict(Counter(o.why for o in lost).most_common()),
            "lost_turns": [o.as_dict() for o in lost[:50]]}
