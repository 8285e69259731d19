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
from engine.pipeline.control import TurnControl
from engine.pipeline.events import EventHub, TurnFinished
from engine.pipeline.messages import AudioOut
from engine.pipeline.metrics import Mark, Metrics

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

    def _play(self, out: AudioOut) -> None:
        unit, metrics = self.unit, self._metrics
        if out.audio.size:
            (self.echo or self.sink).play(out.audio, out.sample_rate, out.turn_id)
            if out.turn_id not in self._started:
                self._started.add(out.turn_id)
                heard = self.sink.first_heard(out.turn_id)
                metrics.mark(unit, out.turn_id, Mark.AUDIO_OUT_FIRST,
                             heard if heard is not None else time.perf_counter(), overwrite=True)
        if out.last:
            metrics.mark(unit, out.turn_id, Mark.REPLY_DONE, time.perf_counter(), overwrite=True)
            metrics.set_finished(unit, out.turn_id)
            self._committed.discard(out.turn_id)
            self._started.discard(out.turn_id)
            record = metrics.turn(unit, out.turn_id)
            if record is not None:
                self._events.emit(TurnFinished(unit, record))
