"""The critical path of one turn: where its voice-to-voice time went, part by part.

One definition for every reader: the budget table of ``parley-cli bench`` (and of
``bench --layouts``), the lab's stacked chart (``engine.bench.plot``), the GUI's
Performance tab (a bar per turn) and Benchmark tab (a bar per layout).

The path is walked along the turn's marks, from the end of speech to the first reply
sample heard: the silence the VAD waited (``vad.min_silence_ms``; with
``turns.speculative`` off the work starts only at the commit, and this wait includes the
reopen grace), the final STT, the learned end of turn's text signal (an LLM pass of its
own, before the reply's), the LLM to its first token and on to its first clause, TTS's
first chunk, then, where the reply was ready before the turn committed, the wait
for the commit (playback holds the audio until then), and the hand-off to the speaker. Each part is the time
between two consecutive marks, so the parts add up to voice-to-voice exactly; a mark
that is missing or out of order adds nothing, and its time goes to the next part.

Waits are taken out of the parts they happened in and shown as waits: the time a stage
waited for a lock (the MLX lock, a shared model's lock, the CPU's compute gate) and the
time a message waited in a queue while its stage was busy with other work (a dropped
revision's transcription, another turn). What is left between the stages' work is
``ENGINE_OVERHEAD``: hand-offs between threads, and the TTS stage's own work before its
model starts. It is measured, between marks, not a remainder of the other parts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from engine.measures import Figure, Mark


class Segment(enum.StrEnum):
    """A part of a turn's critical path, in path order; ``wait`` parts did no work."""

    label: str
    wait: bool

    def __new__(cls, key: str, label: str, wait: bool) -> Segment:
        member = str.__new__(cls, key)
        member._value_ = key
        member.label = label
        member.wait = wait
        return member

    SILENCE_WAIT = ("silence_wait_s", "silence wait (VAD end of speech)", True)
    STT = ("stt_s", "STT (final segment)", False)
    END_OF_TURN = ("end_of_turn_s", "end-of-turn text signal (LLM)", False)
    LLM_FIRST_TOKEN = ("llm_first_token_s", "LLM to first token", False)
    LLM_FIRST_CLAUSE = ("llm_first_clause_s", "LLM first token to first clause", False)
    TTS_FIRST_CHUNK = ("tts_first_chunk_s", "TTS first chunk", False)
    COMMIT_WAIT = ("commit_wait_s", "wait for the turn to commit", True)
    LOCK_WAIT = ("lock_wait_s", "lock waits (MLX, model locks, CPU gate)", True)
    QUEUE_WAIT = ("queue_wait_s", "queue waits (stage busy)", True)
    ENGINE_OVERHEAD = ("engine_overhead_s", "engine overhead (hand-offs)", False)
    TO_SPEAKER = ("to_speaker_s", "to the speaker", False)


def critical_path(marks: Mapping[Mark, float],
                  figures: Mapping[Figure, float]) -> dict[Segment, float] | None:
    """Seconds per ``Segment`` along one turn's critical path, summing to its
    voice-to-voice time; None for a turn without one (no reply heard, no end of speech).

    ``marks`` are a turn's ``perf_counter`` times (``TurnRecord.marks``); ``figures`` its
    recorded figures (the TTS first chunk's compute time and the waits the stages
    recorded: ``Figure.*_LOCK_WAIT_S``, ``Figure.QUEUE_WAIT_S``).
    """
    zero, end = marks.get(Mark.SPEECH_END), marks.get(Mark.AUDIO_OUT_FIRST)
    if zero is None or end is None or end < zero:
        return None
    cursor = zero

    def advance(mark: Mark) -> float:
        """Move the cursor to ``mark`` (never back, never past the first audio heard)."""
        nonlocal cursor
        t = marks.get(mark)
        if t is None or t <= cursor:
            return 0.0
        step = min(t, end) - cursor
        cursor += step
        return step

    out = dict.fromkeys(Segment, 0.0)
    out[Segment.SILENCE_WAIT] = advance(Mark.VAD_END)
    between = advance(Mark.STT_START)
    out[Segment.STT] = advance(Mark.STT_DONE)
    between += advance(Mark.LLM_START)
    out[Segment.LLM_FIRST_TOKEN] = advance(Mark.LLM_FIRST_TOKEN)
    out[Segment.LLM_FIRST_CLAUSE] = advance(Mark.TTS_FIRST_TEXT)
    tts_span = advance(Mark.TTS_FIRST_AUDIO)
    compute = figures.get(Figure.TTS_FIRST_COMPUTE_S)
    out[Segment.TTS_FIRST_CHUNK] = tts_span if compute is None else min(tts_span, compute)
    between += tts_span - out[Segment.TTS_FIRST_CHUNK]  # the hand-off to TTS
    # The reply was ready before the turn committed: playback held it until then.
    out[Segment.COMMIT_WAIT] += advance(Mark.COMMITTED)
    out[Segment.TO_SPEAKER] = advance(Mark.AUDIO_OUT_FIRST)

    def take(wait: Segment, seconds: float | None, *parts: Segment) -> None:
        """Move ``seconds`` of waiting out of ``parts`` (first listed first) into ``wait``."""
        left = max(0.0, seconds or 0.0)
        for part in parts:
            moved = min(left, out[part])
            out[part] -= moved
            out[wait] += moved
            left -= moved

    take(Segment.LOCK_WAIT, figures.get(Figure.STT_LOCK_WAIT_S), Segment.STT)
    take(Segment.LOCK_WAIT, figures.get(Figure.LLM_LOCK_WAIT_S),
         Segment.LLM_FIRST_CLAUSE, Segment.LLM_FIRST_TOKEN)
    take(Segment.LOCK_WAIT, figures.get(Figure.TTS_LOCK_WAIT_S), Segment.TTS_FIRST_CHUNK)
    out[Segment.ENGINE_OVERHEAD] = between
    # The learned end of turn's text signal runs in the LLM stage before the reply starts.
    take(Segment.END_OF_TURN, figures.get(Figure.EOT_TEXT_S), Segment.ENGINE_OVERHEAD)
    take(Segment.LOCK_WAIT, figures.get(Figure.EOT_TEXT_LOCK_WAIT_S), Segment.ENGINE_OVERHEAD)
    take(Segment.QUEUE_WAIT, figures.get(Figure.QUEUE_WAIT_S), Segment.ENGINE_OVERHEAD)
    return out


def path_json(path: Mapping[Segment, float] | None) -> dict[str, float] | None:
    """A critical path as JSON: segment keys (``Segment`` values) to seconds."""
    return None if path is None else {s.value: round(v, 4) for s, v in path.items()}


def median_turn(turns: list[dict]) -> dict | None:
    """The turn of median voice-to-voice among ``turns`` (``engine.report.turn_dict``
    dicts; cancelled ones and those without a critical path left out): the lower middle
    one of an even count, so its parts add up to a voice-to-voice that was measured."""
    timed = sorted((t for t in turns if not t.get("cancelled") and t.get("critical_path")
                    and t.get("voice_to_voice_s") is not None),
                   key=lambda t: t["voice_to_voice_s"])
    return timed[(len(timed) - 1) // 2] if timed else None


def median_path(turns: list[dict]) -> dict[Segment, float] | None:
    """The critical path of ``median_turn(turns)``, by ``Segment``; None without one."""
    turn = median_turn(turns)
    if turn is None:
        return None
    return {s: turn["critical_path"].get(s.value, 0.0) for s in Segment}
