"""TTS stage: reply clauses -> audio chunks, checking for cancellation per chunk.

The reply text stays as the LLM wrote it everywhere else (screen, history); here, right
before synthesis and only here, it becomes what the voice says (``speakable``, in the
reply's language).

Each reply is spoken with a voice of its language (``TextChunk.language``; the settings'
``tts.voices``, else one the model has or can load: ``language_voice``). A language with
no voice, or whose voice fails to load, is said once per language (a ``Notice`` naming
the language and why: it fails nothing) and its replies go on as text, without audio.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import numpy as np
import soxr

from engine.backends.base import TtsModel
from engine.backends.languages import language_name
from engine.backends.tts import kokoro_ja
from engine.backends.voices import language_voice
from engine.errors import ParleyError
from engine.measures import Figure, Mark
from engine.pipeline.events import Notice
from engine.pipeline.messages import AudioOut, Message, TextChunk
from engine.stages.speech_text import speakable
from engine.pipeline.stage import Stage, StageContext
from engine.runtime.compute_gate import Urgency


class TtsStage(Stage[TtsModel]):
    """Runs the shared TTS model in this unit's thread."""

    def __init__(self, ctx: StageContext, model: TtsModel) -> None:
        super().__init__("tts", ctx, model, maxsize=16)
        # (model, language, tts.voice, tts.voices) -> the voice, or None (text only)
        self._voices: dict[tuple, str | None] = {}

    def on_model(self) -> None:
        self._voices.clear()  # a new model: its own voices, its own languages said again

    def voice_for(self, language: str | None) -> str | None:
        """The voice that speaks ``language`` now (``tts.voice`` for None), checked once
        per language and settings; None: that language has no voice (said once)."""
        options = self.ctx.config.tts
        key = (id(self.model), language, options.voice, options.voices)
        if key in self._voices:
            return self._voices[key]
        if language is None:
            voice: str | None = options.voice
        else:
            choice = language_voice(language, options, self.model.voices(), _model_name(self.model),
                                    kokoro_ja.voices())
            voice, reason = choice.voice, choice.reason
            if voice is not None:
                try:
                    self._speaker(voice).check_voice(voice)
                except ParleyError as exc:
                    voice, reason = None, f"its voice {voice!r} cannot be used: {exc}"
            if voice is None:
                self.ctx.events.emit(Notice(
                    self.ctx.unit, self.name, f"replies in {language_name(language)} are shown "
                    f"as text, not spoken: {reason}"))
        self._voices[key] = voice
        return voice

    def _speaker(self, voice: str) -> TtsModel:
        """The model that speaks ``voice``: the stage's, or a voice source beside it
        (``kokoro-ja:...``: Kokoro's Japanese voices, one model per process)."""
        return kokoro_ja.shared() if kokoro_ja.is_voice(voice) else self.model

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, TextChunk):
            yield msg
            return
        turn, gen = msg.turn_id, msg.generation
        turn_metrics = self.ctx.metrics.for_turn(self.ctx.unit, turn, gen)
        voice = self.voice_for(msg.language) if msg.speak else None
        text = speakable(msg.text, msg.language) if voice is not None else ""
        if text and voice is not None:
            options = self.ctx.config.tts
            start = time.perf_counter()
            waited = self.lock_waits_so_far()
            audio_s = 0.0
            clause = msg.text  # on the clause's first chunk: playback learns what is heard when
            rate = int(self.model.sample_rate)
            for chunk in self.computed(self._speaker(voice).synthesize(
                    text, lambda: self.is_stale(msg), voice, options.speed)):
                if self.is_stale(msg):
                    return
                if chunk.sample_rate != rate and chunk.audio.size:
                    # Another source's voice: the unit's audio keeps the model's one rate.
                    chunk = dataclasses.replace(chunk, sample_rate=rate, audio=soxr.resample(
                        chunk.audio, chunk.sample_rate, rate).astype(np.float32, copy=False))
                now = time.perf_counter()
                if turn_metrics.figure_once(Figure.TTS_FIRST_COMPUTE_S, now - start):
                    turn_metrics.mark(Mark.TTS_FIRST_AUDIO, now)
                    self.ctx.compute.set_urgency(Urgency.REPLY)  # someone hears it now
                    turn_metrics.figure(Figure.TTS_LOCK_WAIT_S, self.lock_waits_so_far() - waited)
                    turn_metrics.add(Figure.QUEUE_WAIT_S, self.queue_wait_s)
                    turn_metrics.figures(chunk.figures)  # a remote model's network share
                audio_s += len(chunk.audio) / chunk.sample_rate
                yield AudioOut(turn, gen, chunk.audio, chunk.sample_rate, False, clause)
                if chunk.audio.size:
                    clause = ""
            if audio_s:
                turn_metrics.add(Figure.TTS_COMPUTE_S, time.perf_counter() - start)
                turn_metrics.add(Figure.TTS_AUDIO_S, audio_s)
        if msg.last:
            yield AudioOut(turn, gen, np.zeros(0, np.float32), self.model.sample_rate, True)


def _model_name(model: TtsModel) -> str:
    """How the message that a language has no voice names the model."""
    return type(model).__name__.removesuffix("Tts") or "the TTS model"
