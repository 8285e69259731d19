"""STT stage: speech segments -> transcripts; partials become live-transcript events."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from engine.backends.base import SttModel, SttResult
from engine.config import SttConfig
from engine.measures import Figure, Mark
from engine.pipeline.events import FinalTranscript, PartialTranscript
from engine.pipeline.messages import Message, SpeechSegment, Transcript
from engine.pipeline.stage import Stage, StageContext
from engine.runtime.compute_gate import Urgency, get_compute_gate
from engine.stages.stt_language import LanguageHold
from engine.stages.vad_stage import PartialSequence


def stable_prefix(previous: str, current: str) -> tuple[str, str]:
    """Split ``current`` into the words the previous partial agreed on, and the rest."""
    prev_words, words = previous.split(), current.split()
    n = 0
    norm = lambda w: w.strip(".,!?;:").lower()  # noqa: E731
    while n < min(len(prev_words), len(words)) and norm(prev_words[n]) == norm(words[n]):
        n += 1
    return " ".join(words[:n]), " ".join(words[n:])


#: Less new speech than this after a pause (a breath, a click that reopened the turn) is
#: not decoded on its own: Whisper given a fraction of a second in a padded window may
#: hear words that are not there, so the whole turn is transcribed instead.
MIN_CONTINUED_S = 0.3
#: A transcription's words are taken as heard only when it decoded at least this much
#: speech itself (the whole turn, or the part after the words heard before). Shorter
#: ones are misheard for want of context, and a continuation would keep the error:
#: jfk.flac's first 2 s came out "And so am I fellow Americans." where the whole turn
#: says "And so my fellow Americans"; its first 7.3 s were right.
MIN_HEARD_S = 5.0


#: What Whisper ends a clause cut at a pause with: not the speaker's, so not kept there.
_CUT_END = re.compile(r"[.!?\u2026]+$")
#: A continuation that opens with these attaches to the words before it without a space.
_ATTACHED = ",;:)"
#: Capitalised first words that do not start a sentence ("I", "I'm", ...).
_ALWAYS_CAPITAL = re.compile(r"I(?:'[a-z]+)?\b")


def pause_context(heard: str) -> str:
    """The words heard up to a pause, as the earlier text of the words after it: without
    the sentence end Whisper put where the audio was cut. Whisper ends every clause cut at
    a pause with a period, and given that period it starts what follows as a new sentence:
    the lecture's "...argues for a 4% global wealth tax." came out "...I use for a." then
    "If 4% global wealth tax."; without it, "...I used for a" then "40% global wealth
    tax." (tiny.en still mishears "argues" and "4%")."""
    return _CUT_END.sub("", heard.strip())


def join_after_pause(heard: str, after: str) -> str:
    """``heard`` (its cut-off sentence end dropped, ``pause_context``) and the words
    decoded after the pause: a period between them where Whisper began a new sentence (a
    capital that is not "I"), a comma or colon kept attached, else a space."""
    before, after = pause_context(heard), after.strip()
    if not after:
        return heard.strip()
    if not before:
        return after
    if after[0] in _ATTACHED:
        return before + after
    if after[0].isupper() and not _ALWAYS_CAPITAL.match(after):
        return f"{before}. {after}"
    return f"{before} {after}"


@dataclass(frozen=True, slots=True)
class HeardSoFar:
    """A turn's words up to a pause: the text of a final segment's transcription, which a
    later revision of the same turn (the user went on) begins with."""

    turn_id: int
    t_speech_start: float
    voiced_samples: int
    text: str

    def continued_by(self, msg: SpeechSegment) -> bool:
        """Whether ``msg`` is the same turn, grown by enough speech to decode on its own."""
        return (msg.turn_id == self.turn_id and msg.t_speech_start == self.t_speech_start
                and bool(self.text)
                and msg.voiced_samples - self.voiced_samples >= MIN_CONTINUED_S * msg.sample_rate)


@dataclass(frozen=True, slots=True)
class FinalTranscription:
    """A final segment's transcription: the model's result, the turn's text, the other
    readings of the same words (``SttResult.other_readings``, as whole-turn texts too),
    and the sample its decode began at (0: the whole turn)."""

    result: SttResult
    text: str
    other_readings: tuple[str, ...]
    decoded_from: int
    #: The language of ``text`` and Whisper's probability of it in this turn (None where
    #: the model gave none: a language asked for, a remote server).
    language: str | None = None
    language_probability: float | None = None


class SttStage(Stage[SttModel]):
    """Runs the shared STT model in this unit's thread."""

    def __init__(self, ctx: StageContext, model: SttModel, partials: PartialSequence) -> None:
        super().__init__("stt", ctx, model, maxsize=8)
        self.partials = partials
        self._last_partial: dict[int, str] = {}
        self._heard: HeardSoFar | None = None  # the newest final segment's words
        self._live_started = -math.inf  # when this unit's last live transcription started
        self._hold: LanguageHold | None = None  # stt.language auto: this conversation's

    def is_stale(self, msg: Message) -> bool:
        """A committed turn's final segment is still transcribed once a barge-in cut its
        reply off (the user spoke again before the transcript was out, as a busy CPU
        makes likely): the words were said, so the client gets its transcript and the LLM
        stage keeps them in the history; only the reply is dropped."""
        if isinstance(msg, SpeechSegment | Transcript) and msg.final and self._words_wanted(msg):
            return False
        return super().is_stale(msg)

    def _words_wanted(self, msg: SpeechSegment | Transcript) -> bool:
        return (self.ctx.held.committed(msg.turn_id)
                and self.ctx.control.only_reply_cut(msg.turn_id, msg.generation))

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, SpeechSegment):
            yield msg
            return
        unit, metrics = self.ctx.unit, self.ctx.metrics
        options = self.ctx.config.stt
        hold = self._language_hold(options)
        # Live transcripts are decoded in the conversation's language once one is held: a
        # partial is short, and detection on it would flip-flop (``stt_language``).
        language = hold.language if hold is not None else options.spoken_language
        if not msg.final:
            if msg.revision < self.partials.latest:
                metrics.dropped_stale("stt-partial")
                return  # a newer partial (or the final segment) is already on its way
            if not self._live_due():
                metrics.dropped_stale("stt-partial-shared")
                return
            # After every turn's reply work; dropped once a newer partial or the final
            # segment is on its way (the final one waits in this stage's inbox).
            with self.computing(Urgency.LISTENING,
                                lambda: msg.revision < self.partials.latest) as may_run:
                if not may_run or msg.revision < self.partials.latest:
                    metrics.dropped_stale("stt-partial")
                    return
                self._live_started = time.perf_counter()
                result = self.model.transcribe_live(msg.audio, language, options.beam_size,
                                                    options.fit_window_s)
            if self.is_stale(msg) or msg.revision < self.partials.final:
                return
            stable, unstable = stable_prefix(self._last_partial.get(msg.turn_id, ""), result.text)
            self._last_partial[msg.turn_id] = result.text
            self.ctx.events.emit(PartialTranscript(unit, msg.turn_id, stable, unstable))
            return
        turn_metrics = metrics.for_turn(unit, msg.turn_id, msg.generation)
        turn_metrics.mark(Mark.STT_START, time.perf_counter(), overwrite=True)
        waited = self.lock_waits_so_far()
        with self.computing():
            final = self._transcribe_final(msg, options, language, hold)
        result, text = final.result, final.text
        if msg.voiced_samples - final.decoded_from >= MIN_HEARD_S * msg.sample_rate:
            # Kept even when the revision was dropped since: it is still how the turn began.
            self._heard = HeardSoFar(msg.turn_id, msg.t_speech_start, msg.voiced_samples, text)
        if self.is_stale(msg):
            return
        turn_metrics.mark(Mark.STT_DONE, time.perf_counter(), overwrite=True)
        turn_metrics.figure(Figure.STT_COMPUTE_S, result.compute_seconds)
        turn_metrics.figure(Figure.STT_RTF, result.real_time_factor)
        turn_metrics.figure(Figure.STT_LOCK_WAIT_S, self.lock_waits_so_far() - waited)
        turn_metrics.add(Figure.QUEUE_WAIT_S, self.queue_wait_s)
        turn_metrics.figures(result.figures)  # a remote model's network share
        if final.language_probability is not None:
            turn_metrics.figure(Figure.STT_LANGUAGE_P, final.language_probability)
        turn_metrics.set_transcript(text, language=final.language)
        self._last_partial.pop(msg.turn_id, None)
        final_transcript = FinalTranscript(unit, msg.turn_id, text, language=final.language,
                                           language_probability=final.language_probability)
        if self.ctx.held.committed(msg.turn_id):
            # Nothing to hold. Current, or its words wanted (``is_stale`` above): a
            # barge-in from now on must not drop them either.
            self.ctx.events.emit(final_transcript)
        else:
            self.ctx.held.emit(msg.turn_id, msg.generation, final_transcript)
        yield Transcript(msg.turn_id, msg.generation, text, True, msg.t_speech_end,
                         other_readings=final.other_readings, language=final.language,
                         language_probability=final.language_probability)

    def _live_due(self) -> bool:
        """Whether this unit may start a live transcription now. Where several units
        listen on one CPU (``ComputeGate.sharing``), each transcribes live that many
        times less often (``turns.live_transcription_interval`` x units per place): a
        call cannot be stopped once it runs, and four units' partials back to back kept
        the CPU busy all the time the users spoke, so every turn that ended waited for
        the one in progress (0-390 ms, 160 ms on average; bench serve --units 4)."""
        if not self._computes_on_cpu:
            return True
        sharing = get_compute_gate().sharing(Urgency.LISTENING)
        spacing = self.ctx.config.turns.live_transcription_interval * sharing
        return sharing <= 1.0 or time.perf_counter() - self._live_started >= spacing

    def _language_hold(self, options: SttConfig) -> LanguageHold | None:
        """This conversation's held language under ``stt.language`` auto (None otherwise),
        started again when ``stt.languages`` changes."""
        if not options.detects_language:
            return None
        if self._hold is None or self._hold.allowed != options.allowed_languages:
            self._hold = LanguageHold(options.allowed_languages)
        return self._hold

    def _transcribe_final(self, msg: SpeechSegment, options: SttConfig, language: str | None,
                          hold: LanguageHold | None) -> FinalTranscription:
        """The final segment's transcription in the language asked for, or with ``hold``
        (``stt.language`` auto) in the one ``LanguageHold.choose`` picks from the
        detection: a turn whose detected language is not that one is decoded again in it
        (a short turn in the held language that Whisper heard as another)."""
        if hold is not None and hold.language is not None and self._continued(msg, options):
            # The words before the pause set the language: the rest is decoded in it.
            language = hold.language
        elif hold is not None:
            language = None
        final = self._decode_final(msg, options, language)
        result = final.result
        if hold is None or language is not None:
            return replace(final, language=result.language,
                           language_probability=result.language_probability)
        seconds = (msg.voiced_samples or msg.audio.size) / msg.sample_rate
        choice = hold.choose(result.language_probabilities, seconds, fallback=result.language)
        if choice.language is not None and choice.language != result.language:
            final = self._decode_final(msg, options, choice.language)
        return replace(final, language=choice.language, language_probability=choice.probability)

    def _continued(self, msg: SpeechSegment, options: SttConfig) -> HeardSoFar | None:
        """The words heard before a pause that ``msg`` goes on from, where only the rest is
        decoded (``stt.continue_turn``, a fitted window, a backend that
        ``continues_transcripts``); else None."""
        heard = self._heard
        if (heard is not None and options.continue_turn and options.fit_window_s is not None
                and heard.continued_by(msg) and self.model.continues_transcripts()):
            return heard
        return None

    def _decode_final(self, msg: SpeechSegment, options: SttConfig,
                      language: str | None) -> FinalTranscription:
        """The final segment's decode in ``language`` (None: detected). A turn that
        paused and went on (``_continued``) decodes only the audio after the words heard
        at the pause (``HeardSoFar``), with them as context (``pause_context``, joined by
        ``join_after_pause``)."""
        heard = self._continued(msg, options)
        if heard is not None:
            result = self.model.continue_transcript(msg.audio[heard.voiced_samples:],
                                                    pause_context(heard.text), language,
                                                    options.beam_size, options.fit_window_s)
            return FinalTranscription(
                result, join_after_pause(heard.text, result.text),
                tuple(join_after_pause(heard.text, other) for other in result.other_readings),
                heard.voiced_samples)
        result = self.model.transcribe(msg.audio, language, options.beam_size,
                                       options.fit_window_s)
        return FinalTranscription(result, result.text.strip(),
                                  tuple(other.strip() for other in result.other_readings), 0)
