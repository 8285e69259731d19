"""Turn timelines, stage timings and queue depths, recorded as work happens.

Stage threads write; the GUI and the CLI read immutable snapshots. One lock guards it
all: every write is a few dict operations, far below a millisecond.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from engine.runtime.stats import percentile

if TYPE_CHECKING:  # it reads Mark and Figure: imported where it is used, never at load
    from engine.pipeline.critical_path import Segment


class Mark(enum.StrEnum):
    """The marks of a turn's timeline, in the order they normally happen.

    Declared once: stages record these members, and the JSON report (``timeline``), the
    GUI and the tests read them. Recording anything else raises at once.
    """

    SPEECH_START = "speech_start"  # the user started speaking (first voiced sample)
    SPEECH_END = "speech_end"  # the user stopped speaking (last voiced sample): zero of v2v
    VAD_END = "vad_end"  # the VAD decided the segment ended (after its silence wait)
    COMMITTED = "committed"  # the reopen grace passed: the turn is final
    STT_START = "stt_start"
    STT_DONE = "stt_done"
    LLM_START = "llm_start"
    LLM_FIRST_TOKEN = "llm_first_token"
    TTS_FIRST_TEXT = "tts_first_text"  # first clause handed to TTS
    TTS_FIRST_AUDIO = "tts_first_audio"  # TTS produced its first audio
    AUDIO_OUT_FIRST = "audio_out_first"  # first reply sample heard (sink's clock)
    REPLY_DONE = "reply_done"  # last reply chunk handed to the sink
    LLM_STOPPED = "llm_stopped"  # generation was cut off (barge-in, reopened turn)
    BARGE_IN = "barge_in"  # the user's new speech cut this reply off
    # The LLM stage summarised the turns the prompt no longer keeps, after this turn's
    # reply (engine.stages.summary): when that call started and ended (done or cancelled).
    SUMMARY_START = "summary_start"
    SUMMARY_END = "summary_end"


class TurnKind(enum.StrEnum):
    """How the user's side of a turn came in: said into the microphone, or typed
    (``PipelineUnit.say``: the window's message box, ``parley-cli ask``/``chat``, a
    Realtime client's text). The words are what the history stores."""

    SPOKEN = "spoken"
    TYPED = "typed"


class UnitOfMeasure(enum.Enum):
    """How a figure is shown and rounded."""

    SECONDS = "s"
    COUNT = "count"
    RATE = "tokens/s"
    RATIO = "ratio"


class Figure(enum.StrEnum):
    """Per-turn figures, declared once with their label, unit and where they appear.

    A stage records a figure with ``Metrics.figure``; ``derived`` ones are computed from
    marks and other figures by ``TurnRecord.value`` and cannot be recorded. ``report``
    figures are keys of each turn in ``parley-cli converse --json`` (in this order);
    ``bench`` ones are summarised by ``parley-cli bench``; the GUI's last-turn panel
    shows the bench ones too.
    """

    label: str
    unit: UnitOfMeasure
    derived: bool
    report: bool
    bench: bool

    def __new__(cls, key: str, label: str, unit: UnitOfMeasure, *flags: str) -> Figure:
        member = str.__new__(cls, key)
        member._value_ = key
        member.label = label
        member.unit = unit
        member.derived = "derived" in flags
        member.report = "report" in flags
        member.bench = "bench" in flags
        return member

    VOICE_TO_VOICE_S = ("voice_to_voice_s", "voice-to-voice", UnitOfMeasure.SECONDS,
                        "derived", "report", "bench")
    SILENCE_WAIT_S = ("silence_wait_s", "silence wait (VAD end of speech)", UnitOfMeasure.SECONDS,
                      "derived", "report", "bench")
    STT_COMPUTE_S = ("stt_compute_s", "STT compute (final segment)", UnitOfMeasure.SECONDS,
                     "report", "bench")
    LLM_FIRST_CHUNK_COMPUTE_S = ("llm_first_chunk_compute_s", "LLM to first clause", UnitOfMeasure.SECONDS,
                                 "report", "bench")
    TTS_FIRST_COMPUTE_S = ("tts_first_compute_s", "TTS first chunk", UnitOfMeasure.SECONDS,
                           "report", "bench")
    ENGINE_OVERHEAD_S = ("engine_overhead_s", "engine overhead (hand-offs)", UnitOfMeasure.SECONDS,
                         "derived", "report", "bench")
    LLM_TOKENS = ("llm_tokens", "LLM tokens", UnitOfMeasure.COUNT, "report")
    LLM_PROMPT_TOKENS = ("llm_prompt_tokens", "LLM prompt tokens prefilled", UnitOfMeasure.COUNT, "report")
    LLM_TOKENS_PER_S = ("llm_tokens_per_s", "LLM decode", UnitOfMeasure.RATE, "report", "bench")
    STT_RTF = ("stt_rtf", "STT real-time factor", UnitOfMeasure.RATIO, "report", "bench")
    TTS_RTF = ("tts_rtf", "TTS real-time factor", UnitOfMeasure.RATIO, "derived", "report", "bench")
    DROPPED_REVISIONS = ("dropped_revisions", "dropped revisions", UnitOfMeasure.COUNT, "report")
    # Every reply requested for the turn, the dropped revisions' included (a speculative
    # request to a metered API costs its tokens even when dropped): how many, and their
    # prompt and completion tokens as the model reported them (a request cut off before a
    # remote server's usage came counts its streamed tokens and no prompt tokens).
    LLM_REQUESTS = ("llm_requests", "LLM requests (speculative included)", UnitOfMeasure.COUNT,
                    "report")
    LLM_TURN_PROMPT_TOKENS = ("llm_turn_prompt_tokens", "LLM prompt tokens, all requests",
                              UnitOfMeasure.COUNT, "report")
    LLM_TURN_COMPLETION_TOKENS = ("llm_turn_completion_tokens",
                                  "LLM completion tokens, all requests", UnitOfMeasure.COUNT,
                                  "report")
    LLM_HISTORY_TURNS = ("llm_history_turns", "past turns in the prompt", UnitOfMeasure.COUNT)
    TTS_COMPUTE_S = ("tts_compute_s", "TTS compute (whole reply)", UnitOfMeasure.SECONDS)
    TTS_AUDIO_S = ("tts_audio_s", "TTS audio made", UnitOfMeasure.SECONDS)
    # Learned end of turn, at the decision: each signal, their combination, and whether
    # the turn was committed before its grace ran out (1) or waited for it (0).
    EOT_AUDIO_P = ("end_of_turn_audio_p", "end of turn: audio model", UnitOfMeasure.RATIO, "report")
    EOT_TEXT_P = ("end_of_turn_text_p", "end of turn: text signal", UnitOfMeasure.RATIO, "report")
    EOT_SCORE = ("end_of_turn_score", "end of turn: combined", UnitOfMeasure.RATIO, "report")
    EOT_EARLY = ("end_of_turn_early", "committed before the grace ended", UnitOfMeasure.COUNT, "report")
    # The text signal's own LLM pass, which runs before the reply's (its compute, and
    # what it waited for the CPU).
    EOT_TEXT_S = ("end_of_turn_text_s", "end of turn: text signal compute", UnitOfMeasure.SECONDS,
                  "report")
    EOT_TEXT_LOCK_WAIT_S = ("end_of_turn_text_lock_wait_s", "end of turn: text signal lock wait",
                            UnitOfMeasure.SECONDS, "report")
    # Time to first token, and what a remote stage (an OpenAI-compatible server) spends on
    # the network apart from the server's work: "network" is connecting (0 on a kept-alive
    # connection) plus sending the request (the audio, for STT); "headers" runs from the
    # request's start to the response headers (a streamed reply sends them before it
    # generates, a non-streamed one after its work). None where the stage is local.
    LLM_FIRST_TOKEN_S = ("llm_first_token_s", "LLM time to first token", UnitOfMeasure.SECONDS, "report")
    LLM_NETWORK_S = ("llm_network_s", "LLM network (connect + send)", UnitOfMeasure.SECONDS, "report")
    LLM_HEADERS_S = ("llm_headers_s", "LLM time to response headers", UnitOfMeasure.SECONDS, "report")
    STT_NETWORK_S = ("stt_network_s", "STT network (connect + upload)", UnitOfMeasure.SECONDS, "report")
    STT_HEADERS_S = ("stt_headers_s", "STT time to response headers", UnitOfMeasure.SECONDS, "report")
    # stt.language auto: Whisper's probability of the language the turn was heard in
    # (the language itself is ``TurnRecord.language``).
    STT_LANGUAGE_P = ("stt_language_p", "STT language probability", UnitOfMeasure.RATIO,
                      "report")
    TTS_NETWORK_S = ("tts_network_s", "TTS network (connect + send)", UnitOfMeasure.SECONDS, "report")
    TTS_HEADERS_S = ("tts_headers_s", "TTS time to response headers", UnitOfMeasure.SECONDS, "report")
    # Waits inside the critical path's work: on a lock another thread held (the MLX lock,
    # a shared model's lock; STT's final segment, the LLM up to its first clause, TTS's
    # first chunk), and in a stage's queue while the stage was busy with other work.
    STT_LOCK_WAIT_S = ("stt_lock_wait_s", "STT lock wait", UnitOfMeasure.SECONDS, "report")
    LLM_LOCK_WAIT_S = ("llm_lock_wait_s", "LLM lock wait (to first clause)", UnitOfMeasure.SECONDS,
                       "report")
    TTS_LOCK_WAIT_S = ("tts_lock_wait_s", "TTS lock wait (first chunk)", UnitOfMeasure.SECONDS,
                       "report")
    QUEUE_WAIT_S = ("queue_wait_s", "queue waits (stage busy)", UnitOfMeasure.SECONDS, "report")
    # The critical path's wait for the turn to commit (engine.pipeline.critical_path).
    COMMIT_WAIT_S = ("commit_wait_s", "wait for the turn to commit", UnitOfMeasure.SECONDS,
                     "derived", "report", "bench")


class UndeclaredError(ValueError):
    """A mark or figure that ``Mark`` / ``Figure`` does not declare (a typo, in code)."""


_Declared = TypeVar("_Declared", bound=enum.Enum)


def _check(name: object, kind: type[_Declared], what: str) -> _Declared:
    """``name`` as a member of ``kind``, or an UndeclaredError listing the members."""
    if not isinstance(name, kind):
        raise UndeclaredError(f"{what} {name!r} is not declared in engine.pipeline.metrics.{kind.__name__}; "
                              f"declared: {', '.join(m.value for m in kind)}")
    return name


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn's timeline, texts and figures, frozen for readers."""

    unit: int
    turn_id: int
    marks: Mapping[Mark, float]
    transcript: str
    reply: str
    cancelled: bool
    finished: bool
    figures: Mapping[Figure, float] = field(default_factory=dict)
    kind: TurnKind = TurnKind.SPOKEN
    #: The language the turn's words were heard in (``Transcript.language``); None where
    #: unknown.
    language: str | None = None

    def since_speech_end(self, mark: Mark) -> float | None:
        """Seconds from the end of the user's speech to ``mark`` (None if missing)."""
        if Mark.SPEECH_END not in self.marks or mark not in self.marks:
            return None
        return self.marks[mark] - self.marks[Mark.SPEECH_END]

    @property
    def voice_to_voice(self) -> float | None:
        """First reply audio heard minus the end of the user's speech."""
        return self.since_speech_end(Mark.AUDIO_OUT_FIRST)

    @property
    def silence_wait(self) -> float | None:
        """How long turn-taking waited in silence before work started."""
        return self.since_speech_end(Mark.VAD_END if Mark.VAD_END in self.marks else Mark.COMMITTED)

    def value(self, figure: Figure) -> float | None:
        """A figure of this turn, recorded or derived; None where it was not measured."""
        if not figure.derived:
            return self.figures.get(figure)
        if figure is Figure.VOICE_TO_VOICE_S:
            return self.voice_to_voice
        if figure is Figure.SILENCE_WAIT_S:
            return self.silence_wait
        if figure is Figure.TTS_RTF:
            audio = self.figures.get(Figure.TTS_AUDIO_S)
            compute = self.figures.get(Figure.TTS_COMPUTE_S)
            return compute / audio if audio and compute is not None else None
        from engine.pipeline.critical_path import Segment

        path = self.critical_path()
        if path is None:
            return None
        return path[Segment.COMMIT_WAIT if figure is Figure.COMMIT_WAIT_S
                    else Segment.ENGINE_OVERHEAD]

    def critical_path(self) -> dict[Segment, float] | None:
        """Where this turn's voice-to-voice time went: seconds per
        ``engine.pipeline.critical_path.Segment``, summing to it (None without one)."""
        from engine.pipeline.critical_path import critical_path

        return critical_path(self.marks, self.figures)

    def timeline(self) -> dict[str, float]:
        """Marks relative to the end of speech, in seconds, in ``Mark`` order."""
        zero = self.marks.get(Mark.SPEECH_END)
        if zero is None:
            return {}
        return {m.value: round(self.marks[m] - zero, 4) for m in Mark if m in self.marks}


@dataclass(frozen=True, slots=True)
class StageStats:
    """Compute time of one stage over its recent messages."""

    name: str
    count: int
    last_s: float | None
    p50_s: float | None
    p95_s: float | None
    queue_depth: int
    queue_capacity: int
    dropped_stale: int


@dataclass
class _Turn:
    unit: int
    turn_id: int
    marks: dict[Mark, float] = field(default_factory=dict)
    transcript: str = ""
    reply: list[str] = field(default_factory=list)
    cancelled: bool = False
    finished: bool = False
    figures: dict[Figure, float] = field(default_factory=dict)
    min_generation: int = 0  # work of older generations (a dropped revision) is ignored
    kind: TurnKind = TurnKind.SPOKEN
    language: str | None = None


class Metrics:
    """The recorder one engine owns; thread-safe."""

    def __init__(self, keep_turns: int = 200, keep_samples: int = 500) -> None:
        self._lock = threading.Lock()
        self._turns: dict[tuple[int, int], _Turn] = {}
        self._order: deque[tuple[int, int]] = deque()
        self._keep_turns = keep_turns
        self._keep_samples = keep_samples
        self._stage_times: dict[str, deque[float]] = {}
        self._stage_counts: dict[str, int] = {}
        self._dropped: dict[str, int] = {}

    def _turn(self, unit: int, turn_id: int) -> _Turn:
        key = (unit, turn_id)
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = _Turn(unit, turn_id)
            self._order.append(key)
            while len(self._order) > self._keep_turns:
                self._turns.pop(self._order.popleft(), None)
        return turn

    def _current(self, unit: int, turn_id: int, generation: int | None) -> _Turn | None:
        turn = self._turn(unit, turn_id)
        return None if generation is not None and generation < turn.min_generation else turn

    def mark(self, unit: int, turn_id: int, name: Mark, t: float, overwrite: bool = False,
             generation: int | None = None) -> None:
        """Record ``name`` at ``t``; the first write wins unless ``overwrite``.

        Writes made under a ``generation`` older than the turn's current revision are
        ignored, so a dropped revision cannot leave marks behind. A name that is not a
        ``Mark`` raises ``UndeclaredError``.
        """
        _check(name, Mark, "timeline mark")
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None and (overwrite or name not in turn.marks):
                turn.marks[name] = t

    def figure(self, unit: int, turn_id: int, name: Figure, value: float, add: bool = False,
               generation: int | None = None) -> None:
        """Record a per-turn figure (compute seconds, tokens/s...); ``add`` sums."""
        _check_recordable(name)
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None:
                turn.figures[name] = turn.figures.get(name, 0.0) + value if add else value

    def figure_once(self, unit: int, turn_id: int, name: Figure, value: float,
                    generation: int | None = None) -> bool:
        """Record a figure only if the turn has none of that name yet; True if recorded."""
        _check_recordable(name)
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is None or name in turn.figures:
                return False
            turn.figures[name] = value
            return True

    def set_transcript(self, unit: int, turn_id: int, text: str, generation: int | None = None,
                       *, language: str | None = None) -> None:
        """The turn's words, and the language they were heard in where known."""
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None:
                turn.transcript = text
                turn.language = language

    def set_kind(self, unit: int, turn_id: int, kind: TurnKind) -> None:
        """How the turn's words came in (``TurnKind``); a turn is spoken unless told."""
        with self._lock:
            self._turn(unit, turn_id).kind = kind

    def add_reply(self, unit: int, turn_id: int, text: str, generation: int | None = None) -> None:
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None:
                turn.reply.append(text)

    def reset_turn_work(self, unit: int, turn_id: int, generation: int) -> None:
        """A reopened turn: forget the dropped revision's work, count the drop.

        ``generation`` is the new revision's; later writes from older ones are ignored.
        """
        with self._lock:
            turn = self._turn(unit, turn_id)
            turn.min_generation = generation
            turn.marks = {k: v for k, v in turn.marks.items() if k is Mark.SPEECH_START}
            turn.reply.clear()
            turn.transcript = ""
            turn.language = None
            dropped = turn.figures.get(Figure.DROPPED_REVISIONS, 0.0) + 1
            turn.figures = {Figure.DROPPED_REVISIONS: dropped}

    def set_cancelled(self, unit: int, turn_id: int) -> None:
        with self._lock:
            self._turn(unit, turn_id).cancelled = True

    def set_finished(self, unit: int, turn_id: int) -> None:
        with self._lock:
            self._turn(unit, turn_id).finished = True

    def stage_time(self, stage: str, seconds: float) -> None:
        """One message's compute time in ``stage``."""
        with self._lock:
            times = self._stage_times.get(stage)
            if times is None:
                times = self._stage_times[stage] = deque(maxlen=self._keep_samples)
            times.append(seconds)
            self._stage_counts[stage] = self._stage_counts.get(stage, 0) + 1

    def dropped_stale(self, stage: str) -> None:
        """A message of a cancelled generation was dropped by ``stage``."""
        with self._lock:
            self._dropped[stage] = self._dropped.get(stage, 0) + 1

    # ----------------------------------------------------------------- readers
    def turns(self) -> tuple[TurnRecord, ...]:
        """All kept turns, oldest first."""
        with self._lock:
            return tuple(self._record(self._turns[k]) for k in self._order if k in self._turns)

    def turn(self, unit: int, turn_id: int) -> TurnRecord | None:
        with self._lock:
            turn = self._turns.get((unit, turn_id))
            return self._record(turn) if turn else None

    def stage_stats(self, depths: dict[str, tuple[int, int]]) -> tuple[StageStats, ...]:
        """Per-stage figures; ``depths`` maps stage name to (queue depth, capacity)."""
        with self._lock:
            names = list(dict.fromkeys([*depths, *self._stage_times]))
            out = []
            for name in names:
                times = list(self._stage_times.get(name, ()))
                depth, cap = depths.get(name, (0, 0))
                out.append(StageStats(name, self._stage_counts.get(name, 0),
                                      times[-1] if times else None, percentile(times, 50),
                                      percentile(times, 95), depth, cap,
                                      self._dropped.get(name, 0)))
            return tuple(out)

    @staticmethod
    def _record(turn: _Turn) -> TurnRecord:
        return TurnRecord(unit=turn.unit, turn_id=turn.turn_id, marks=dict(turn.marks),
                          transcript=turn.transcript, reply="".join(turn.reply).strip(),
                          cancelled=turn.cancelled, finished=turn.finished,
                          figures=dict(turn.figures), kind=turn.kind, language=turn.language)


def _check_recordable(name: object) -> None:
    figure = _check(name, Figure, "figure")
    if figure.derived:
        raise UndeclaredError(f"figure {figure.value!r} is derived from other figures; "
                              "it cannot be recorded")
