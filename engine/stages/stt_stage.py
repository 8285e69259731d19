"""STT stage: speech segments -> transcripts; partials become live-transcript events."""

from __future__ import annotations

import time
from collections.abc import Iterator

from engine.backends.base import SttModel
from engine.pipeline.events import FinalTranscript, PartialTranscript
from engine.pipeline.messages import Message, SpeechSegment, Transcript
from engine.pipeline.metrics import Figure, Mark
from engine.pipeline.stage import Stage, StageContext
from engine.stages.vad_stage import PartialSequence


def stable_prefix(previous: str, current: str) -> tuple[str, str]:
    """Split ``current`` into the words the previous partial agreed on, and the rest."""
    prev_words, words = previous.split(), current.split()
    n = 0
    norm = lambda w: w.strip(".,!?;:").lower()  # noqa: E731
    while n < min(len(prev_words), len(words)) and norm(prev_words[n]) == norm(words[n]):
        n += 1
    return " ".join(words[:n]), " ".join(words[n:])


class SttStage(Stage[SttModel]):
    """Runs the shared STT model in this unit's thread."""

    def __init__(self, ctx: StageContext, model: SttModel, partials: PartialSequence) -> None:
        super().__init__("stt", ctx, model, maxsize=8)
        self.partials = partials
        self._last_partial: dict[int, str] = {}

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, SpeechSegment):
            yield msg
            return
        unit, metrics = self.ctx.unit, self.ctx.metrics
        options = self.ctx.config.stt
        language = options.language or None
        if not msg.final:
            if msg.revision < self.partials.latest:
                metrics.dropped_stale("stt-partial")
                return  # a newer partial (or the final segment) is already on its way
            result = self.model.transcribe(msg.audio, language, options.beam_size,
                                           options.fit_window_s)
            if self.is_stale(msg) or msg.revision < self.partials.final:
                return
            stable, unstable = stable_prefix(self._last_partial.get(msg.turn_id, ""), result.text)
            self._last_partial[msg.turn_id] = result.text
            self.ctx.events.emit(PartialTranscript(unit, msg.turn_id, stable, unstable))
            return
        metrics.mark(unit, msg.turn_id, Mark.STT_START, time.perf_counter(), True, msg.generation)
        waited = self.lock_waits_so_far()
        result = self.model.transcribe(msg.audio, language, options.beam_size,
                                       options.fit_window_s)
        if self.is_stale(msg):
            return
        text = result.text.strip()
        metrics.mark(unit, msg.turn_id, Mark.STT_DONE, time.perf_counter(), True, msg.generation)
        metrics.figure(unit, msg.turn_id, Figure.STT_COMPUTE_S, result.compute_seconds,
                       generation=msg.generation)
        metrics.figure(unit, msg.turn_id, Figure.STT_RTF, result.real_time_factor,
                       generation=msg.generation)
        metrics.figure(unit, msg.turn_id, Figure.STT_LOCK_WAIT_S, self.lock_waits_so_far() - waited,
                       generation=msg.generation)
        metrics.figure(unit, msg.turn_id, Figure.QUEUE_WAIT_S, self.queue_wait_s, True,
                       msg.generation)
        for name, value in result.figures.items():  # a remote model's network share
            metrics.figure(unit, msg.turn_id, name, value, generation=msg.generation)
        metrics.set_transcript(unit, msg.turn_id, text, msg.generation)
        self._last_partial.pop(msg.turn_id, None)
        self.ctx.held.emit(msg.turn_id, msg.generation, FinalTranscript(unit, msg.turn_id, text))
        yield Transcript(msg.turn_id, msg.generation, text, True, msg.t_speech_end)
