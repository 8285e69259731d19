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
from typing import TypeVar

from engine.measures import Figure, Mark
from engine.pipeline.critical_path import Segment, critical_path
from engine.runtime.stats import percentile


class TurnKind(enum.StrEnum):
    """How the user's side of a turn came in: said into the microphone, or typed
    (``PipelineUnit.say``: the window's message box, ``parley-cli ask``/``chat``, a
    Realtime client's text). The words are what the history stores."""

    SPOKEN = "spoken"
    TYPED = "typed"


class UndeclaredError(ValueError):
    """A mark or figure that ``Mark`` / ``Figure`` does not declare (a typo, in code)."""


_Declared = TypeVar("_Declared", bound=enum.Enum)


def _check(name: object, kind: type[_Declared], what: str) -> _Declared:
    """``name`` as a member of ``kind``, or an UndeclaredError listing the members."""
    if not isinstance(name, kind):
        raise UndeclaredError(f"{what} {name!r} is not declared in engine.measures.{kind.__name__}; "
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
        path = self.critical_path()
        if path is None:
            return None
        return path[Segment.COMMIT_WAIT if figure is Figure.COMMIT_WAIT_S
                    else Segment.ENGINE_OVERHEAD]

    def critical_path(self) -> dict[Segment, float] | None:
        """Where this turn's voice-to-voice time went: seconds per
        ``engine.pipeline.critical_path.Segment``, summing to it (None without one)."""
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

    def for_turn(self, unit: int, turn_id: int, generation: int | None = None) -> TurnMetrics:
        """The writer of one turn's work on ``unit``, done under ``generation`` (None: the
        turn's own bookkeeping, which no dropped revision makes stale)."""
        return TurnMetrics(self, unit, turn_id, generation)

    def mark(self, unit: int, turn_id: int, name: Mark, t: float, *, overwrite: bool = False,
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

    def figure(self, unit: int, turn_id: int, name: Figure, value: float, *, add: bool = False,
               generation: int | None = None) -> None:
        """Record a per-turn figure (compute seconds, tokens/s...); ``add`` sums."""
        _check_recordable(name)
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None:
                turn.figures[name] = turn.figures.get(name, 0.0) + value if add else value

    def figure_once(self, unit: int, turn_id: int, name: Figure, value: float, *,
                    generation: int | None = None) -> bool:
        """Record a figure only if the turn has none of that name yet; True if recorded."""
        _check_recordable(name)
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is None or name in turn.figures:
                return False
            turn.figures[name] = value
            return True

    def set_transcript(self, unit: int, turn_id: int, text: str, *, generation: int | None = None,
                       language: str | None = None) -> None:
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

    def add_reply(self, unit: int, turn_id: int, text: str, *, generation: int | None = None) -> None:
        """Append ``text`` to the turn's reply as it is spoken."""
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


class TurnMetrics:
    """What one piece of work writes about its turn: bound to the unit, the turn and the
    generation it runs under, so a call names only the mark or figure.

    Obtained with ``Metrics.for_turn``. Writes of a generation older than the turn's
    current revision are ignored, as ``Metrics`` does for every write.
    """

    __slots__ = ("_metrics", "generation", "turn_id", "unit")

    def __init__(self, metrics: Metrics, unit: int, turn_id: int, generation: int | None) -> None:
        self._metrics = metrics
        self.unit = unit
        self.turn_id = turn_id
        self.generation = generation

    def mark(self, name: Mark, t: float, *, overwrite: bool = False) -> None:
        """Record ``name`` at ``t``; the first write wins unless ``overwrite``."""
        self._metrics.mark(self.unit, self.turn_id, name, t, overwrite=overwrite,
                           generation=self.generation)

    def figure(self, name: Figure, value: float) -> None:
        """Record ``value`` as the turn's ``name``, replacing any earlier one."""
        self._metrics.figure(self.unit, self.turn_id, name, value, generation=self.generation)

    def figures(self, values: Mapping[Figure, float]) -> None:
        """Record each of ``values`` (a backend result's own figures) as ``figure`` does."""
        for name, value in values.items():
            self.figure(name, value)

    def add(self, name: Figure, value: float) -> None:
        """Add ``value`` to the turn's ``name`` (0 where none yet): work done in parts."""
        self._metrics.figure(self.unit, self.turn_id, name, value, add=True,
                             generation=self.generation)

    def figure_once(self, name: Figure, value: float) -> bool:
        """Record ``name`` only if the turn has none yet; True if recorded."""
        return self._metrics.figure_once(self.unit, self.turn_id, name, value,
                                         generation=self.generation)

    def set_transcript(self, text: str, *, language: str | None = None) -> None:
        """The turn's words, and the language they were heard in where known."""
        self._metrics.set_transcript(self.unit, self.turn_id, text, generation=self.generation,
                                     language=language)

    def add_reply(self, text: str) -> None:
        """Append ``text`` to the turn's reply as it is spoken."""
        self._metrics.add_reply(self.unit, self.turn_id, text, generation=self.generation)


def _check_recordable(name: object) -> None:
    figure = _check(name, Figure, "figure")
    if figure.derived:
        raise UndeclaredError(f"figure {figure.value!r} is derived from other figures; "
                              "it cannot be recorded")
