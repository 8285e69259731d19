"""The critical path of a turn (engine/pipeline/critical_path.py) on recorded marks and
figures: its parts add up to voice-to-voice, the wait for the commit shows where the
reply was ready first, and waits are taken out of the parts they fell in.

Times are binary fractions so that every sum is exact.
"""

from __future__ import annotations

import pytest

from engine.measures import Figure, Mark
from engine.pipeline.critical_path import Segment, critical_path, median_path, median_turn
from engine.pipeline.metrics import Metrics
from engine.report import format_budget, turn_dict

S = Segment


def _record(marks: dict[Mark, float], figures: dict[Figure, float] = ()):
    """A turn recorded the way the stages record it (a real Metrics), read back."""
    metrics = Metrics()
    for mark, t in marks.items():
        metrics.mark(0, 1, mark, 100.0 + t)
    for figure, value in dict(figures).items():
        metrics.figure(0, 1, figure, value)
    return metrics.turn(0, 1)


# A speculative turn: the work starts when the VAD ends the segment (0.3125 s of
# silence) and the reply is ready (0.875) before the reopen grace commits the turn (1.25).
SPECULATIVE = {Mark.SPEECH_END: 0.0, Mark.VAD_END: 0.3125, Mark.STT_START: 0.3125,
               Mark.STT_DONE: 0.5, Mark.LLM_START: 0.5, Mark.LLM_FIRST_TOKEN: 0.625,
               Mark.TTS_FIRST_TEXT: 0.75, Mark.TTS_FIRST_AUDIO: 0.875, Mark.COMMITTED: 1.25,
               Mark.AUDIO_OUT_FIRST: 1.265625}


def test_a_reply_ready_before_the_commit_waits_for_it_and_the_parts_add_up():
    record = _record(SPECULATIVE, {Figure.TTS_FIRST_COMPUTE_S: 0.0625})
    path = record.critical_path()
    assert path == {S.SILENCE_WAIT: 0.3125, S.STT: 0.1875, S.END_OF_TURN: 0.0,
                    S.LLM_FIRST_TOKEN: 0.125, S.LLM_FIRST_CLAUSE: 0.125, S.TTS_FIRST_CHUNK: 0.0625,
                    S.COMMIT_WAIT: 0.375,  # 0.875 -> 1.25: the chain was shorter
                    S.LOCK_WAIT: 0.0, S.QUEUE_WAIT: 0.0,
                    S.ENGINE_OVERHEAD: 0.0625,  # the hand-off to TTS: its span less its compute
                    S.TO_SPEAKER: 0.015625}
    assert sum(path.values()) == record.voice_to_voice == 1.265625
    assert list(path) == list(Segment)  # every part, in path order
    # The derived figures are the path's parts: one definition.
    assert record.value(Figure.COMMIT_WAIT_S) == 0.375
    assert record.value(Figure.ENGINE_OVERHEAD_S) == 0.0625


def test_no_commit_wait_where_the_chain_is_longer_than_the_grace():
    slow = {**SPECULATIVE, Mark.TTS_FIRST_TEXT: 1.25, Mark.TTS_FIRST_AUDIO: 1.5,
            Mark.COMMITTED: 1.125, Mark.AUDIO_OUT_FIRST: 1.5}
    path = critical_path(_record(slow).marks, {Figure.TTS_FIRST_COMPUTE_S: 0.25})
    assert path[S.COMMIT_WAIT] == 0.0
    assert path[S.LLM_FIRST_CLAUSE] == 0.625 and path[S.TTS_FIRST_CHUNK] == 0.25
    assert sum(path.values()) == 1.5


def test_the_end_of_turn_text_signal_before_the_reply_is_its_own_part_not_overhead():
    # The LLM stage scored the transcript (0.0625 computing, 0.03125 waiting for the CPU)
    # between the STT's end (0.5) and the reply's start (0.625).
    marks = {**SPECULATIVE, Mark.LLM_START: 0.625, Mark.LLM_FIRST_TOKEN: 0.6875}
    figures = {Figure.TTS_FIRST_COMPUTE_S: 0.0625, Figure.EOT_TEXT_S: 0.0625,
               Figure.EOT_TEXT_LOCK_WAIT_S: 0.03125}
    path = _record(marks, figures).critical_path()
    assert path[S.END_OF_TURN] == 0.0625 and path[S.LOCK_WAIT] == 0.03125
    # 0.125 between STT and LLM, less the two: 0.03125, plus the 0.0625 hand-off to TTS.
    assert path[S.ENGINE_OVERHEAD] == 0.03125 + 0.0625
    assert sum(path.values()) == 1.265625


def test_lock_and_queue_waits_come_out_of_the_parts_they_fell_in():
    figures = {Figure.TTS_FIRST_COMPUTE_S: 0.0625, Figure.STT_LOCK_WAIT_S: 0.03125,
               Figure.LLM_LOCK_WAIT_S: 0.1875,  # more than the clause part: the rest from the first token
               Figure.TTS_LOCK_WAIT_S: 0.03125, Figure.QUEUE_WAIT_S: 0.25}
    marks = {**SPECULATIVE, Mark.STT_START: 0.4375}  # STT was busy: its queue wait
    path = _record(marks, figures).critical_path()
    assert path[S.STT] == 0.03125  # 0.4375 -> 0.5, less 0.03125 waiting for the lock
    assert path[S.LLM_FIRST_CLAUSE] == 0.0 and path[S.LLM_FIRST_TOKEN] == 0.0625
    assert path[S.TTS_FIRST_CHUNK] == 0.03125
    assert path[S.LOCK_WAIT] == 0.03125 + 0.1875 + 0.03125
    # 0.125 before STT + 0.0625 before TTS were between stages; a queue wait can only be
    # taken from there (it is capped by it), the rest of it is not invented.
    assert path[S.QUEUE_WAIT] == 0.1875 and path[S.ENGINE_OVERHEAD] == 0.0
    assert sum(path.values()) == 1.265625


def test_work_started_at_the_commit_has_its_wait_in_the_silence():
    # turns.speculative off: the segment goes out at the commit, VAD_END is marked then.
    marks = {Mark.SPEECH_END: 0.0, Mark.VAD_END: 1.25, Mark.COMMITTED: 1.25,
             Mark.STT_START: 1.25, Mark.STT_DONE: 1.5, Mark.LLM_START: 1.5,
             Mark.TTS_FIRST_TEXT: 2.0, Mark.TTS_FIRST_AUDIO: 2.125, Mark.AUDIO_OUT_FIRST: 2.125}
    path = _record(marks).critical_path()
    assert path[S.SILENCE_WAIT] == 1.25 and path[S.COMMIT_WAIT] == 0.0
    # No first-token mark (a backend that streams none): the LLM's time is all the clause's.
    assert path[S.LLM_FIRST_TOKEN] == 0.0 and path[S.LLM_FIRST_CLAUSE] == 0.5
    assert path[S.TTS_FIRST_CHUNK] == 0.125  # no compute figure: the whole span
    assert sum(path.values()) == 2.125


def test_a_mark_out_of_order_adds_nothing_and_the_sum_stays_voice_to_voice():
    # The speaker's clock heard the first sample before TTS's mark was written.
    marks = {**SPECULATIVE, Mark.COMMITTED: 0.25, Mark.AUDIO_OUT_FIRST: 0.8125}
    path = _record(marks).critical_path()
    assert path[S.TTS_FIRST_CHUNK] == 0.0625 and path[S.TO_SPEAKER] == 0.0
    assert sum(path.values()) == 0.8125


def test_no_path_without_a_reply_heard_or_an_end_of_speech():
    no_audio = {m: t for m, t in SPECULATIVE.items() if m is not Mark.AUDIO_OUT_FIRST}
    assert _record(no_audio).critical_path() is None
    typed = {m: t for m, t in SPECULATIVE.items() if m is not Mark.SPEECH_END}
    assert _record(typed).critical_path() is None
    assert turn_dict(_record(no_audio))["critical_path"] is None


def _turn(v2v_end: float, cancelled: bool = False) -> dict:
    out = turn_dict(_record({**SPECULATIVE, Mark.COMMITTED: 0.5, Mark.AUDIO_OUT_FIRST: v2v_end},
                            {Figure.TTS_FIRST_COMPUTE_S: 0.0625}))
    out["cancelled"] = cancelled
    return out


def test_the_median_turn_is_a_measured_one():
    turns = [_turn(1.5), _turn(1.0), _turn(2.0, cancelled=True), _turn(1.25), _turn(3.0)]
    # 1.0, 1.25, 1.5, 3.0 (the cancelled one left out): the lower middle one.
    assert median_turn(turns)["voice_to_voice_s"] == 1.25
    path = median_path(turns)
    assert sum(path.values()) == pytest.approx(1.25)
    assert path[S.TO_SPEAKER] == pytest.approx(1.25 - 0.875)
    assert median_turn([]) is None and median_path([_turn(1.0, cancelled=True)]) is None


def test_the_budget_table_has_a_row_per_part_and_the_sum():
    text = format_budget([("a", [_turn(1.0)]), ("b", [_turn(1.5), _turn(1.25), _turn(2.0)])])
    lines = text.splitlines()
    assert lines[0].split()[-2:] == ["a", "b"]
    rows = {line[:40].strip(): line[40:].split() for line in lines[1:-1]}
    assert [label for label in rows][:len(Segment)] == [s.label for s in Segment]
    assert rows["silence wait (VAD end of speech)"] == ["312.5", "312.5"]
    assert rows["= voice-to-voice"] == ["1000.0", "1500.0"]
    for column in (0, 1):
        parts = sum(float(rows[s.label][column]) for s in Segment)
        assert parts == pytest.approx(float(rows["= voice-to-voice"][column]), abs=0.6)
    assert rows["turns measured (median of)"] == ["1", "3"]
    assert "not a remainder" in " ".join(lines)
