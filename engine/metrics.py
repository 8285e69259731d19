"""Turn timelines, stage timings and queue depths, recorded as work happens.

Stage threads write; the GUI and the CLI read immutable snapshots. One lock guards it
all: every write is a few dict operations, far below a millisecond.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

#: The marks of a turn's timeline, in the order they normally happen.
MARKS = (
    "speech_start",  # the user started speaking (first voiced sample)
    "speech_end",  # the user stopped speaking (last voiced sample): zero of voice-to-voice
    "vad_end",  # the VAD decided the segment ended (after its silence wait)
    "committed",  # the reopen grace passed: the turn is final
    "stt_start",
    "stt_done",
    "llm_start",
    "llm_first_token",
    "tts_first_text",  # first clause handed to TTS
    "tts_first_audio",  # TTS produced its first audio
    "audio_out_first",  # first reply sample heard (sink's clock)
    "reply_done",  # last reply chunk handed to the sink
    "llm_stopped",  # generation was cut off (barge-in, reopened turn)
    "barge_in",  # the user's new speech cut this reply off
)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn's timeline and texts, frozen for readers."""

    unit: int
    turn_id: int
    marks: dict[str, float]
    transcript: str
    reply: str
    cancelled: bool
    finished: bool
    stt_compute_s: float | None = None
    llm_first_chunk_compute_s: float | None = None  # LLM start to first text chunk
    tts_first_compute_s: float | None = None
    llm_tokens: int = 0
    llm_tokens_per_s: float | None = None
    llm_prompt_tokens: int = 0
    llm_history_turns: int = 0
    stt_rtf: float | None = None
    tts_rtf: float | None = None
    tts_audio_s: float = 0.0
    dropped_revisions: int = 0

    def since_speech_end(self, mark: str) -> float | None:
        """Seconds from the end of the user's speech to ``mark`` (None if missing)."""
        if "speech_end" not in self.marks or mark not in self.marks:
            return None
        return self.marks[mark] - self.marks["speech_end"]

    @property
    def voice_to_voice(self) -> float | None:
        """First reply audio heard minus the end of the user's speech."""
        return self.since_speech_end("audio_out_first")

    @property
    def silence_wait(self) -> float | None:
        """How long turn-taking waited in silence before work started."""
        start = "vad_end" if "vad_end" in self.marks else "committed"
        return self.since_speech_end(start)

    def timeline(self) -> dict[str, float]:
        """Marks relative to the end of speech, in seconds, in MARKS order."""
        zero = self.marks.get("speech_end")
        if zero is None:
            return {}
        return {m: round(self.marks[m] - zero, 4) for m in MARKS if m in self.marks}


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


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * min(max(q, 0.0), 100.0) / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class _Turn:
    unit: int
    turn_id: int
    marks: dict[str, float] = field(default_factory=dict)
    transcript: str = ""
    reply: list[str] = field(default_factory=list)
    cancelled: bool = False
    finished: bool = False
    figures: dict[str, float] = field(default_factory=dict)
    min_generation: int = 0  # work of older generations (a dropped revision) is ignored


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

    def mark(self, unit: int, turn_id: int, name: str, t: float, overwrite: bool = False,
             generation: int | None = None) -> None:
        """Record ``name`` at ``t``; the first write wins unless ``overwrite``.

        Writes made under a ``generation`` older than the turn's current revision are
        ignored, so a dropped revision cannot leave marks behind.
        """
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None and (overwrite or name not in turn.marks):
                turn.marks[name] = t

    def figure(self, unit: int, turn_id: int, name: str, value: float, add: bool = False,
               generation: int | None = None) -> None:
        """Record a per-turn figure (compute seconds, tokens/s...)."""
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None:
                turn.figures[name] = turn.figures.get(name, 0.0) + value if add else value

    def figure_once(self, unit: int, turn_id: int, name: str, value: float,
                    generation: int | None = None) -> bool:
        """Record a figure only if the turn has none of that name yet; True if recorded."""
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is None or name in turn.figures:
                return False
            turn.figures[name] = value
            return True

    def set_transcript(self, unit: int, turn_id: int, text: str, generation: int | None = None) -> None:
        with self._lock:
            turn = self._current(unit, turn_id, generation)
            if turn is not None:
                turn.transcript = text

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
            turn.marks = {k: v for k, v in turn.marks.items() if k == "speech_start"}
            turn.reply.clear()
            turn.transcript = ""
            dropped = turn.figures.get("dropped_revisions", 0.0) + 1
            turn.figures = {"dropped_revisions": dropped}

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
        f = turn.figures
        return TurnRecord(
            unit=turn.unit, turn_id=turn.turn_id, marks=dict(turn.marks),
            transcript=turn.transcript, reply="".join(turn.reply).strip(),
            cancelled=turn.cancelled, finished=turn.finished,
            stt_compute_s=f.get("stt_compute_s"),
            llm_first_chunk_compute_s=f.get("llm_first_chunk_compute_s"),
            tts_first_compute_s=f.get("tts_first_compute_s"),
            llm_tokens=int(f.get("llm_tokens", 0)), llm_tokens_per_s=f.get("llm_tokens_per_s"),
            llm_prompt_tokens=int(f.get("llm_prompt_tokens", 0)),
            llm_history_turns=int(f.get("llm_history_turns", 0)),
            stt_rtf=f.get("stt_rtf"),
            tts_rtf=(f["tts_compute_s"] / f["tts_audio_s"]) if f.get("tts_audio_s") else None,
            tts_audio_s=f.get("tts_audio_s", 0.0),
            dropped_revisions=int(f.get("dropped_revisions", 0)),
        )
