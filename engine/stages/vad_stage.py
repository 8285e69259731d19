"""VAD stage: the source stage. Reads the audio source, finds turns, barges in, commits.

It yields speech segments for STT (growing partials while the user speaks, the final
segment at the turn's end). Playback goes through the narrow ``Playback`` interface:
``is_playing`` (mute-while-speaking), ``cut`` (barge-in) and ``commit`` (release a
committed turn's held reply).

It is also where the sound devices' health reaches the listeners: after every read it
collects the reports of its source and of the playback's sink (``poll_health``, see
``engine.audio.health``) and emits each as an ``AudioStatus`` event, a problem also as an
``EngineError`` (stage "microphone" or "speaker"). Whatever the source, a block holding
invalid samples (NaN, infinities, values far beyond full scale) is replaced by silence
before the VAD model sees it, and reported once per episode (device "input").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSource, InputMarker
from engine.audio.echo import EchoCanceller
from engine.audio.health import DeviceState, HealthLog, HealthReport, SampleGuard
from engine.backends.base import VadModel
from engine.config import BargeIn, EngineConfig
from engine.measures import Figure, Mark
from engine.pipeline.control import CancelReason
from engine.pipeline.end_of_turn import RevisionScores
from engine.pipeline.events import AudioStatus, EngineError, TurnCancelled, UserSpeaking
from engine.pipeline.messages import Message, SpeechSegment
from engine.pipeline.playback import Playback
from engine.pipeline.stage import SourceStage, StageContext
from engine.runtime.compute_gate import Urgency
from engine.stages.end_of_turn.decide import AUDIO_SCORE_SILENCE_S
from engine.stages.end_of_turn.smart_turn import WINDOW_S as SMART_TURN_WINDOW_S
from engine.stages.turns import Committed, Partial, Reopened, SegmentEnded, Started, TurnDetector, TurnEvent

_HEALTH_POLL_S = 0.1  # how often the devices' health is collected
#: How often a speculated turn's learned decision is looked at between two blocks (32 ms
#: apart): the commit comes within this of its second score.
DECISION_POLL_S = 0.004
log = logging.getLogger("parley.end_of_turn")


class PartialSequence:
    """Sequence numbers shared by VAD and STT for live transcription.

    ``latest``: the newest partial; STT skips an older one before spending compute on it.
    ``final``: partials numbered below it came before a final segment; their text is
    no longer news and is not shown.
    """

    def __init__(self) -> None:
        self.latest = -1
        self.final = -1


class VadStage(SourceStage[VadModel]):
    """Source -> frames -> speech probability -> turn events -> segments for STT."""

    def __init__(self, ctx: StageContext, vad_model: VadModel, source: AudioSource, playback: Playback,
                 partials: PartialSequence, next_turn_id: Callable[[], int],
                 echo: EchoCanceller | None = None) -> None:
        super().__init__("vad", ctx, source, vad_model)
        self.playback = playback
        self.echo = echo  # takes the reply's own echo out before the VAD hears the input
        self.partials = partials
        self._next_turn_id = next_turn_id
        self.turn_id = 0
        self._partial_seq = 0
        self._pending = np.zeros(0, np.float32)
        self._pending_t = 0.0
        self._playing_turn: int | None = None
        self._config: EngineConfig = ctx.config
        self.stream = vad_model.new_stream()
        self.detector = TurnDetector(ctx.config.vad, ctx.config.turns, vad_model.frame_samples,
                                     vad_model.sample_rate)
        self.input_health = HealthLog("input")
        self._guard = SampleGuard(self.input_health, lambda: "the audio input")
        self._t_health = 0.0
        self._segment_generation = 0  # the revision the speculative STT/LLM work runs under
        self._segment_end = 0.0  # its end of speech (capture clock)
        self._decided_early = False
        # The silence from which the speculated revision's audio is offered to the audio
        # model (see _on_turn_event's SegmentEnded); None: no offer is due.
        self._audio_offer_from_s: float | None = None

    def on_model(self) -> None:
        self.stream = self.model.new_stream()
        if self.detector.frame_s != self.model.frame_samples / self.model.sample_rate:
            self.detector = TurnDetector(self._config.vad, self._config.turns,
                                         self.model.frame_samples, self.model.sample_rate)
            self._pending = np.zeros(0, np.float32)

    def process_block(self, block: AudioBlock) -> Iterator[Message]:
        config = self.ctx.config
        if config is not self._config:  # a runtime change: thresholds and waits, mid-turn too
            self._config = config
            self.detector.configure(config.vad, config.turns)
        samples = self._guard.check(block.samples, PIPELINE_RATE)
        if self.echo is not None:
            block = self.echo.clean(AudioBlock(samples, block.t_start, block.marker))
            samples = block.samples
        if self._pending.size == 0:
            self._pending_t = block.t_start  # the cleaned block's own capture time
        self._pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n = self.model.frame_samples
        mute = config.turns.barge_in is BargeIn.MUTE_WHILE_SPEAKING
        while self._pending.size >= n:
            frame, self._pending = self._pending[:n], self._pending[n:]
            t = self._pending_t
            self._pending_t += n / PIPELINE_RATE
            if mute and self.playback.is_playing:
                continue  # no echo cancellation: the mic would hear the assistant
            probability = self.stream.speech_probability(frame)
            for event in self.detector.push(frame, probability, t):
                yield from self._on_turn_event(event)
            offer_from = self._audio_offer_from_s
            if offer_from is not None and self.detector.silence_s >= offer_from - 1e-6:
                self._offer_audio_score()
            yield from self._learned_decision()
        if block.marker is InputMarker.COMMIT:
            yield from self.on_source_end()
        elif block.marker is InputMarker.CLEAR:
            self._clear()

    def between_blocks_s(self) -> float | None:
        """``DECISION_POLL_S`` while a speculated turn awaits its learned decision: the
        scores come from other threads, and the commit need not wait for the next block."""
        return DECISION_POLL_S if self._awaits_learned_decision() else None

    def between_blocks(self) -> Iterator[Message]:
        return self._learned_decision()

    def _awaits_learned_decision(self) -> bool:
        return self.detector.may_commit_now and self.ctx.end_of_turn.learned

    def _learned_decision(self) -> Iterator[Message]:
        """Once the speculative segment went out, under learned end of turn: commit as
        soon as the audio model and the text signal say the turn is over (the unit's
        ``EndOfTurnPolicy.commit_early``), even before ``min_silence_ms``; otherwise the
        grace runs out as without a model. Both were asked for at the speculative start;
        looked at every frame and between blocks."""
        if not self._awaits_learned_decision():
            return
        turn, generation = self.turn_id, self._segment_generation
        if not self.ctx.end_of_turn.commit_early(turn, generation):
            return
        self._record_end_of_turn(turn, generation, early=True)
        self._decided_early = True
        for event in self.detector.commit_now():
            yield from self._on_turn_event(event)

    def _offer_audio_score(self) -> None:
        """Offer the audio model the speculated revision as it stands this frame: the
        score runs on the newest offer once the CPU is free for it (``AudioScorer``), so
        the offers stop once it started."""
        policy = self.ctx.end_of_turn
        if not policy.audio_wanted(self.turn_id, self._segment_generation):
            self._audio_offer_from_s = None
            return
        policy.offer_audio(self.turn_id, self._segment_generation,
                           self.detector.audio_so_far(last_s=SMART_TURN_WINDOW_S))

    def _record_end_of_turn(self, turn: int, generation: int, early: bool) -> None:
        turn_metrics = self.ctx.metrics.for_turn(self.ctx.unit, turn)
        scores = self.ctx.end_of_turn.scores(turn, generation)
        for figure, value in ((Figure.EOT_AUDIO_P, scores.audio), (Figure.EOT_TEXT_P, scores.text),
                              (Figure.EOT_SCORE, scores.combined)):
            if value is not None:
                turn_metrics.figure(figure, value)
        turn_metrics.figure(Figure.EOT_EARLY, 1.0 if early else 0.0)
        self._log_revision("committed early" if early else "committed at the grace's end", scores)
        self.ctx.end_of_turn.forget(turn)

    def _log_revision(self, outcome: str, scores: RevisionScores) -> None:
        """One speculative revision's signals and what became of it, as a debug record
        (``record.end_of_turn``) that ``parley-cli bench turn-taking`` collects."""
        log.debug("end of turn: %s (audio %s, text %s)", outcome, scores.audio, scores.text,
                  extra={"end_of_turn": {"unit": self.ctx.unit, "turn": self.turn_id,
                                         "t_speech_end": self._segment_end, "outcome": outcome,
                                         "audio": scores.audio, "text": scores.text,
                                         "audio_at": scores.audio_at, "text_at": scores.text_at,
                                         "decided_at": time.perf_counter()}})

    def on_source_end(self) -> Iterator[Message]:
        for event in self.detector.flush():
            yield from self._on_turn_event(event)

    # ------------------------------------------------------------------ failures, health
    def turn_of(self, what: object) -> int | None:
        """A failure while reading or detecting ends the turn the user is speaking, if any."""
        if isinstance(what, AudioBlock) or isinstance(what, str):
            return self.turn_id if self.detector.in_turn else None
        return super().turn_of(what)

    def end_failed_turn(self, turn_id: int) -> None:
        """Drop the turn in progress (its audio and any work started on it): the detector
        starts afresh, and the turn ends now; it will never be committed."""
        if turn_id != self.turn_id or not self.detector.in_turn:
            return super().end_failed_turn(turn_id)
        ctx = self.ctx
        ctx.control.cancel_turn(turn_id, CancelReason.FAILED)
        self.detector.reset()
        self._pending = np.zeros(0, np.float32)
        ctx.metrics.set_cancelled(ctx.unit, turn_id)
        ctx.events.emit(UserSpeaking(ctx.unit, turn_id, False))
        ctx.events.emit(TurnCancelled(ctx.unit, turn_id, CancelReason.FAILED))

    def after_read(self) -> None:
        now = time.monotonic()
        if now - self._t_health < _HEALTH_POLL_S:
            return
        self._t_health = now
        reports = self.input_health.drain()
        # Every source and sink has poll_health (a file's reports nothing; a wrapper's,
        # such as push-to-talk, is the wrapped source's).
        reports += self.source.poll_health() + self.playback.sink.poll_health()
        for report in reports:
            self._emit_health(report)

    def _emit_health(self, report: HealthReport) -> None:
        unit = self.ctx.unit
        self.ctx.events.emit(AudioStatus(unit, report.device, report.state.value, report.message))
        if report.state is not DeviceState.OK:
            self.ctx.events.emit(EngineError(unit, report.device, report.message))

    def _clear(self) -> None:
        """Forget the turn in progress: its audio, and any work already started on it."""
        if self.detector.in_turn:
            self.ctx.control.cancel_turn(self.turn_id, CancelReason.CLEARED)
            self.ctx.events.emit(UserSpeaking(self.ctx.unit, self.turn_id, False))
            self.ctx.events.emit(TurnCancelled(self.ctx.unit, self.turn_id, CancelReason.CLEARED))
        self.detector.reset()
        self._pending = np.zeros(0, np.float32)

    def _on_turn_event(self, event: TurnEvent) -> Iterator[Message]:
        ctx, unit = self.ctx, self.ctx.unit
        if isinstance(event, Started):
            if not event.resumed:
                self.turn_id = self._next_turn_id()
                self._maybe_barge_in()
                ctx.metrics.for_turn(unit, self.turn_id).mark(Mark.SPEECH_START, event.t_start)
            ctx.events.emit(UserSpeaking(unit, self.turn_id, True))
            ctx.compute.set_urgency(Urgency.LISTENING)
        elif isinstance(event, Partial):
            self._partial_seq += 1
            self.partials.latest = self._partial_seq
            yield SpeechSegment(self.turn_id, ctx.control.generation, event.audio, PIPELINE_RATE,
                                False, event.t_speech_start, time.perf_counter(), self._partial_seq)
        elif isinstance(event, SegmentEnded):
            self._decided_early = False
            self._segment_generation = ctx.control.generation
            self._segment_end = event.t_speech_end
            ctx.end_of_turn.speculation_started(self.turn_id, self._segment_generation)
            yield self._final(event)
            # Offered once it heard enough silence, and never on this frame: the STT's
            # call asks for the CPU first, so the score waits for it and runs on the
            # revision as it stands then (AudioScorer), before the transcript's text
            # signal. Offered each frame until its score starts (process_block).
            scored = ctx.end_of_turn.scores_audio
            self._audio_offer_from_s = (max(AUDIO_SCORE_SILENCE_S,
                                            self.detector.silence_s + self.detector.frame_s)
                                        if scored else None)
        elif isinstance(event, Reopened):
            self._audio_offer_from_s = None
            if ctx.end_of_turn.learned:
                self._log_revision("reopened", ctx.end_of_turn.scores(self.turn_id,
                                                                      self._segment_generation))
            generation = ctx.control.cancel_turn(self.turn_id, CancelReason.REOPENED)
            ctx.metrics.reset_turn_work(unit, self.turn_id, generation)
            ctx.events.emit(TurnCancelled(unit, self.turn_id, CancelReason.REOPENED))
        elif isinstance(event, Committed):
            self._audio_offer_from_s = None
            ctx.events.emit(UserSpeaking(unit, self.turn_id, False))
            if not event.speculated:
                yield self._final(event)
            ctx.metrics.for_turn(unit, self.turn_id).mark(Mark.COMMITTED, time.perf_counter())
            learned = ctx.end_of_turn.learned
            if learned and event.speculated and not self._decided_early:
                self._record_end_of_turn(self.turn_id, self._segment_generation, early=False)
            ctx.held.commit(self.turn_id)
            self.playback.commit(self.turn_id)
            self._playing_turn = self.turn_id

    def _final(self, event: SegmentEnded | Committed) -> SpeechSegment:
        ctx, unit = self.ctx, self.ctx.unit
        turn_metrics = ctx.metrics.for_turn(unit, self.turn_id)
        turn_metrics.mark(Mark.SPEECH_END, event.t_speech_end, overwrite=True)
        turn_metrics.mark(Mark.VAD_END, time.perf_counter(), overwrite=True)
        # Any partial still queued or being decoded is now useless.
        self.partials.latest = self.partials.final = self._partial_seq + 1
        # The user waits from now on: this unit's work goes before later-ended turns'.
        ctx.compute.set_urgency(Urgency.FIRST_AUDIO)
        return SpeechSegment(self.turn_id, ctx.control.generation, event.audio, PIPELINE_RATE,
                             True, event.t_speech_start, event.t_speech_end,
                             voiced_samples=event.voiced_samples)

    def note_reply(self, turn: int) -> None:
        """``turn`` (e.g. a typed message) is answered now: speech cuts it off."""
        self._playing_turn = turn

    def _maybe_barge_in(self) -> None:
        if self.ctx.config.turns.barge_in is not BargeIn.FULL_DUPLEX or self._playing_turn is None:
            return
        turn = self._playing_turn
        record = self.ctx.metrics.turn(self.ctx.unit, turn)
        reply_pending = record is not None and not record.finished and not record.cancelled
        if self.playback.is_playing or reply_pending:
            self.cut_off(turn)

    def cut_off(self, turn: int) -> None:
        """Drop every reply in flight (``turn`` is the one heard now) and silence it.

        Called from this stage (barge-in) and from other threads (an interrupt button):
        the control, playback, metrics and events are each thread-safe.
        """
        self.ctx.control.cancel_all(turn, CancelReason.BARGE_IN)
        self.playback.cut()
        self.ctx.metrics.set_cancelled(self.ctx.unit, turn)
        self.ctx.metrics.for_turn(self.ctx.unit, turn).mark(Mark.BARGE_IN, time.perf_counter())
        self.ctx.events.emit(TurnCancelled(self.ctx.unit, turn, CancelReason.BARGE_IN))
