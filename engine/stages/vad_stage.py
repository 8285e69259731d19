"""VAD stage: reads the audio source, finds turns, handles barge-in and reopening."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from engine.audio.base import AudioSink, AudioSource
from engine.config import BargeIn, EngineConfig
from engine.conversation import BARGE_IN, REOPENED
from engine.events import TurnCancelled, UserSpeaking
from engine.messages import EndOfStream, SpeechSegment, SpeechStarted, TurnCommitted
from engine.stage import Stage, StageContext
from engine.turns import Committed, Partial, Reopened, SegmentEnded, Started, TurnDetector

_READ_TIMEOUT_S = 0.05


class PartialGate:
    """Sequence numbers shared by VAD and STT for live transcription.

    ``latest``: the newest partial; STT skips an older one before spending compute on it.
    ``final``: partials numbered below it came before a final segment; their text is
    no longer news and is not shown.
    """

    def __init__(self) -> None:
        self.latest = -1
        self.final = -1


class VadStage(Stage):
    """Source -> frames -> speech probability -> turn events -> segments for STT."""

    def __init__(self, ctx: StageContext, config: EngineConfig, vad_model, source: AudioSource,
                 sink: AudioSink, sink_stage: Stage, gate: PartialGate,
                 next_turn_id: Callable[[], int]) -> None:
        super().__init__("vad", ctx, maxsize=1)
        self.source = source
        self.sink = sink
        self.sink_stage = sink_stage
        self.gate = gate
        self.stream = vad_model.new_stream()
        self.frame_samples = vad_model.frame_samples
        self.detector = TurnDetector(config.vad, config.turns, self.frame_samples,
                                     vad_model.sample_rate)
        self.barge_in = config.turns.barge_in
        self._next_turn_id = next_turn_id
        self.turn_id = 0
        self._partial_seq = 0
        self._pending = np.zeros(0, np.float32)
        self._pending_t = 0.0
        self._playing_turn: int | None = None

    def _run(self) -> None:  # reads the source instead of an inbox
        try:
            while not self.ctx.stopping.is_set():
                block = self.source.read(_READ_TIMEOUT_S)
                if block is None:
                    if self.source.finished:
                        break
                    continue
                start = time.perf_counter()
                self._feed(block.samples, block.t_start)
                self.ctx.metrics.stage_time(self.name, time.perf_counter() - start)
            if not self.ctx.stopping.is_set():
                for event in self.detector.flush():
                    self._handle_event(event)
                self.emit(EndOfStream(self.turn_id, self.ctx.control.generation))
        except Exception as exc:  # noqa: BLE001 - reported, the unit then drains
            self._report(f"{type(exc).__name__}: {exc}")
            self.emit(EndOfStream(self.turn_id, self.ctx.control.generation))

    def _feed(self, samples: np.ndarray, t_start: float) -> None:
        if self._pending.size == 0:
            self._pending_t = t_start
        self._pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n = self.frame_samples
        rate = self.source.sample_rate
        while self._pending.size >= n:
            frame, self._pending = self._pending[:n], self._pending[n:]
            t = self._pending_t
            self._pending_t += n / rate
            if self.barge_in is BargeIn.MUTE_WHILE_SPEAKING and self.sink.is_playing:
                continue  # no echo cancellation: the mic would hear the assistant
            probability = self.stream.speech_probability(frame)
            for event in self.detector.push(frame, probability, t):
                self._handle_event(event)

    def _handle_event(self, event) -> None:
        ctx, unit = self.ctx, self.ctx.unit
        if isinstance(event, Started):
            if not event.resumed:
                self.turn_id = self._next_turn_id()
                self._maybe_barge_in(event.t_start)
                ctx.metrics.mark(unit, self.turn_id, "speech_start", event.t_start)
            ctx.events.emit(UserSpeaking(unit, self.turn_id, True))
            self.emit(SpeechStarted(self.turn_id, ctx.control.generation, event.t_start))
        elif isinstance(event, Partial):
            self._partial_seq += 1
            self.gate.latest = self._partial_seq
            self.emit(SpeechSegment(self.turn_id, ctx.control.generation, event.audio, 16000,
                                    False, event.t_speech_start, time.perf_counter(),
                                    self._partial_seq))
        elif isinstance(event, SegmentEnded):
            self._send_final(event.audio, event.t_speech_start, event.t_speech_end)
        elif isinstance(event, Reopened):
            generation = ctx.control.cancel_turn(self.turn_id, REOPENED)
            ctx.metrics.reset_turn_work(unit, self.turn_id, generation)
            ctx.events.emit(TurnCancelled(unit, self.turn_id, REOPENED))
        elif isinstance(event, Committed):
            ctx.events.emit(UserSpeaking(unit, self.turn_id, False))
            if not event.speculated:
                self._send_final(event.audio, event.t_speech_start, event.t_speech_end)
            ctx.metrics.mark(unit, self.turn_id, "committed", time.perf_counter())
            ctx.gate.commit(self.turn_id)
            self._playing_turn = self.turn_id
            self.sink_stage.put(TurnCommitted(self.turn_id, ctx.control.generation))

    def _send_final(self, audio: np.ndarray, t_start: float, t_end: float) -> None:
        ctx, unit = self.ctx, self.ctx.unit
        ctx.metrics.mark(unit, self.turn_id, "speech_end", t_end, overwrite=True)
        ctx.metrics.mark(unit, self.turn_id, "vad_end", time.perf_counter(), overwrite=True)
        # Any partial still queued or being decoded is now useless.
        self.gate.latest = self.gate.final = self._partial_seq + 1
        self.emit(SpeechSegment(self.turn_id, ctx.control.generation, audio, 16000, True,
                                t_start, t_end))

    def _maybe_barge_in(self, t_start: float) -> None:
        if self.barge_in is not BargeIn.FULL_DUPLEX or self._playing_turn is None:
            return
        turn = self._playing_turn
        record = self.ctx.metrics.turn(self.ctx.unit, turn)
        reply_pending = record is not None and not record.finished and not record.cancelled
        if not (self.sink.is_playing or reply_pending):
            return
        self.ctx.control.cancel_all(turn, BARGE_IN)
        self.sink.flush()
        self.ctx.metrics.set_cancelled(self.ctx.unit, turn)
        self.ctx.metrics.mark(self.ctx.unit, turn, "barge_in", time.perf_counter())
        self.ctx.events.emit(TurnCancelled(self.ctx.unit, turn, BARGE_IN))
