"""Playback: the one narrow interface to a unit's audio output.

With speculative turns the reply's audio is made before the turn is committed, so it
must wait. ``Playback`` holds each turn's audio until the source stage commits the
turn (the control lane: a direct call, never a message overtaking others in a queue),
plays committed audio at once, and cuts everything off on barge-in. The source stage
sees only ``is_playing``, ``commit`` and ``cut``; the sink stage only ``offer``.

Both threads call in; one lock keeps hold, release and play in order. ``AudioSink.play``
never blocks, so the lock is held for microseconds.

With echo cancellation, ``echo`` (a ``ReferenceTap``, ``engine/audio/echo.py``) plays
each chunk on the sink and hands it to the canceller as the reference, stamped with when
it will be heard; a cut drops the reference that will not be heard.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from engine.audio.base import AudioSink
from engine.measures import Mark
from engine.pipeline.control import TurnControl
from engine.pipeline.events import EventHub, TurnFinished
from engine.pipeline.messages import AudioOut
from engine.pipeline.metrics import Metrics

if TYPE_CHECKING:
    from engine.audio.echo import ReferenceTap


class Playback:
    """Holds uncommitted audio, plays committed audio, records what was heard when."""

    def __init__(self, unit: int, sink: AudioSink, control: TurnControl, metrics: Metrics,
                 events: EventHub, echo: ReferenceTap | None = None) -> None:
        self.unit = unit
        self.sink = sink
        self.echo = echo  # the echo canceller's reference tap on ``sink``, if any
        self._control = control
        self._metrics = metrics
        self._events = events
        self._lock = threading.Lock()
        self._committed: set[int] = set()
        self._held: list[AudioOut] = []
        self._started: set[int] = set()
        self._spoken: dict[int, SpokenReply] = {}

    @property
    def is_playing(self) -> bool:
        """True while reply audio remains to be heard."""
        return self.sink.is_playing

    def commit(self, turn_id: int) -> None:
        """The turn is final: play its held audio (still current) and what follows."""
        with self._lock:
            self._committed.add(turn_id)
            if len(self._committed) > 64:  # cut-off turns never finish; keep the set small
                self._committed = {t for t in self._committed if t > turn_id - 32}
            released = [m for m in self._held if m.turn_id == turn_id]
            self._held = [m for m in self._held if m.turn_id != turn_id]
            for out in released:
                if not self._control.is_stale(out.turn_id, out.generation):
                    self._play(out)

    def offer(self, out: AudioOut) -> None:
        """Reply audio from TTS: played now if its turn is committed, else held."""
        with self._lock:
            if out.turn_id in self._committed:
                self._play(out)
            else:
                self._held.append(out)

    def cut(self) -> int:
        """Barge-in or stop: drop held and queued audio now; samples dropped."""
        with self._lock:
            self._held.clear()
            dropped = self.sink.flush()
            if self.echo is not None:
                self.echo.cut()
            return dropped

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything played was heard (or timeout)."""
        return self.sink.wait_idle(timeout)

    def heard_text(self, turn_id: int, seconds: float | None = None) -> str:
        """The words of ``turn_id``'s reply heard in its first ``seconds`` of audio (None:
        until now, by the sink's clock); "" if none was played."""
        with self._lock:
            spoken = self._spoken.get(turn_id)
        if spoken is None:
            return ""
        if seconds is None:
            first = self.sink.first_heard(turn_id)
            seconds = 0.0 if first is None else max(0.0, time.perf_counter() - first)
        return spoken.heard(seconds)

    def _play(self, out: AudioOut) -> None:
        unit, metrics = self.unit, self._metrics
        turn_metrics = metrics.for_turn(unit, out.turn_id)
        if out.audio.size:
            spoken = self._spoken.get(out.turn_id)
            if spoken is None:
                spoken = self._spoken[out.turn_id] = SpokenReply()
                if len(self._spoken) > 16:  # turns only grow: keep the latest ones
                    for old in sorted(self._spoken)[:-8]:
                        del self._spoken[old]
            spoken.add(out.text, out.audio.size / out.sample_rate)
            (self.echo or self.sink).play(out.audio, out.sample_rate, out.turn_id)
            if out.turn_id not in self._started:
                self._started.add(out.turn_id)
                heard = self.sink.first_heard(out.turn_id)
                turn_metrics.mark(Mark.AUDIO_OUT_FIRST,
                                  heard if heard is not None else time.perf_counter(), overwrite=True)
        if out.last:
            turn_metrics.mark(Mark.REPLY_DONE, time.perf_counter(), overwrite=True)
            metrics.set_finished(unit, out.turn_id)
            self._committed.discard(out.turn_id)
            self._started.discard(out.turn_id)
            record = metrics.turn(unit, out.turn_id)
            if record is not None:
                self._events.emit(TurnFinished(unit, record))


class SpokenReply:
    """Which clause of a reply plays when: the clauses and their audio seconds, in order."""

    def __init__(self) -> None:
        self._clauses: list[list] = []  # [text, seconds]

    def add(self, text: str, seconds: float) -> None:
        """Audio played: a new clause when ``text`` is given, else more of the last one."""
        if text or not self._clauses:
            self._clauses.append([text, 0.0])
        self._clauses[-1][1] += seconds

    def heard(self, seconds: float) -> str:
        """The words heard in the first ``seconds``: whole clauses, then the share of the
        words of the clause playing at that moment (speech is close to even in time)."""
        words: list[str] = []
        start = 0.0
        for text, length in self._clauses:
            if start >= seconds:
                break
            if start + length <= seconds:
                words.append(text)
            else:
                part = text.split()
                words.append(" ".join(part[:int(len(part) * (seconds - start) / length)]))
            start += length
        return " ".join(w for w in words if w)
