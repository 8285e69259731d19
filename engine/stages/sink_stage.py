"""Sink stage: holds a turn's audio until the turn is committed, then plays it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from engine.audio.base import AudioSink
from engine.events import TurnFinished
from engine.messages import AudioOut, Message, TurnCommitted
from engine.stage import Stage, StageContext


class SinkStage(Stage):
    """The last stage: plays committed audio, finishes turns, signals the drain."""

    def __init__(self, ctx: StageContext, sink: AudioSink) -> None:
        super().__init__("sink", ctx, maxsize=64)
        self.sink = sink
        self._committed: set[int] = set()
        self._held: list[AudioOut] = []
        self._started: set[int] = set()
        self.drained = threading.Event()

    def process(self, msg: Message) -> Iterator[Message]:
        if isinstance(msg, TurnCommitted):
            self._committed.add(msg.turn_id)
            released = [m for m in self._held if m.turn_id == msg.turn_id]
            self._held = [m for m in self._held if m.turn_id != msg.turn_id]
            for out in released:
                if not self.is_stale(out):
                    self._play(out)
        elif isinstance(msg, AudioOut):
            if msg.turn_id in self._committed:
                self._play(msg)
            else:
                self._held.append(msg)
        return iter(())

    def _play(self, out: AudioOut) -> None:
        unit, metrics = self.ctx.unit, self.ctx.metrics
        if out.audio.size:
            self.sink.play(out.audio, out.sample_rate, out.turn_id)
            if out.turn_id not in self._started:
                self._started.add(out.turn_id)
                heard = self.sink.first_heard(out.turn_id)
                metrics.mark(unit, out.turn_id, "audio_out_first",
                             heard if heard is not None else time.perf_counter(), overwrite=True)
        if out.last:
            metrics.mark(unit, out.turn_id, "reply_done", time.perf_counter(), overwrite=True)
            metrics.set_finished(unit, out.turn_id)
            self._committed.discard(out.turn_id)
            self._started.discard(out.turn_id)
            record = metrics.turn(unit, out.turn_id)
            if record is not None:
                self.ctx.events.emit(TurnFinished(unit, record))

    def on_end(self) -> None:
        # Everything before EndOfStream is queued in the sink: wait until it was heard.
        while not self.ctx.stopping.is_set() and not self.sink.wait_idle(0.1):
            pass
        self.drained.set()
