"""Metrics (declared marks and figures, derived values, revisions) and the JSON/bench reports.

Times below are binary fractions (0.25, 0.125...) so that derived values are exact.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from engine.measures import Figure, Mark, UnitOfMeasure
from engine.pipeline.metrics import Metrics, TurnMetrics, TurnRecord, UndeclaredError
from engine.report import BENCH_FIGURES, bench_summary, format_bench, turn_dict

REPORT_KEYS = ["turn_id", "transcript", "reply", "cancelled", "timeline", "voice_to_voice_s",
               "silence_wait_s", "stt_compute_s", "llm_first_chunk_compute_s",
               "tts_first_compute_s", "engine_overhead_s", "llm_tokens", "llm_prompt_tokens",
               "llm_tokens_per_s", "stt_rtf", "tts_rtf", "dropped_revisions"]


def _full_turn(metrics: Metrics, unit: int = 0, turn: int = 1) -> TurnRecord:
    """A complete turn, its marks recorded out of order."""
    for name, t in ((Mark.AUDIO_OUT_FIRST, 11.0), (Mark.SPEECH_END, 10.0),
                    (Mark.SPEECH_START, 8.5), (Mark.VAD_END, 10.25), (Mark.COMMITTED, 10.5),
                    (Mark.STT_DONE, 10.75), (Mark.REPLY_DONE, 13.0)):
        metrics.mark(unit, turn, name, t)
    for name, value in ((Figure.STT_COMPUTE_S, 0.125), (Figure.LLM_FIRST_CHUNK_COMPUTE_S, 0.25),
                        (Figure.TTS_FIRST_COMPUTE_S, 0.0625), (Figure.TTS_COMPUTE_S, 0.5),
                        (Figure.TTS_AUDIO_S, 2.0), (Figure.LLM_TOKENS, 42),
                        (Figure.LLM_PROMPT_TOKENS, 118.0), (Figure.LLM_TOKENS_PER_S, 12.3456),
                        (Figure.STT_RTF, 0.123456)):
        metrics.figure(unit, turn, name, value)
    metrics.set_transcript(unit, turn, "what time is it")
    metrics.add_reply(unit, turn, "It is ")
    metrics.add_reply(unit, turn, "noon. ")
    return metrics.turn(unit, turn)


# ---------------------------------------------------------------- declared names


@pytest.mark.parametrize("name", ["speech_end", "stt_dne", "STT_DONE"])
def test_an_undeclared_mark_raises_naming_it_and_the_declared_ones(name):
    metrics = Metrics()
    with pytest.raises(UndeclaredError) as err:
        metrics.mark(0, 1, name, 1.0)
    text = str(err.value)
    assert repr(name) in text
    assert "Mark" in text
    for mark in Mark:
        assert mark.value in text
    assert isinstance(err.value, ValueError)
    assert metrics.turns() == ()  # nothing was recorded, not even an empty turn


def test_a_figure_is_not_a_mark_and_a_mark_is_not_a_figure():
    metrics = Metrics()
    with pytest.raises(UndeclaredError, match="stt_compute_s"):
        metrics.mark(0, 1, Figure.STT_COMPUTE_S, 1.0)
    with pytest.raises(UndeclaredError, match="speech_end"):
        metrics.figure(0, 1, Mark.SPEECH_END, 1.0)


@pytest.mark.parametrize("name", ["stt_rtf", "llm_tokns"])
def test_an_undeclared_figure_raises_naming_the_declared_ones(name):
    metrics = Metrics()
    with pytest.raises(UndeclaredError) as err:
        metrics.figure(0, 1, name, 1.0)
    assert repr(name) in str(err.value)
    for figure in Figure:
        assert figure.value in str(err.value)
    with pytest.raises(UndeclaredError):
        metrics.figure_once(0, 1, name, 1.0)


@pytest.mark.parametrize("figure", [f for f in Figure if f.derived])
def test_a_derived_figure_cannot_be_recorded(figure):
    metrics = Metrics()
    with pytest.raises(UndeclaredError, match="derived") as err:
        metrics.figure(0, 1, figure, 0.5)
    assert figure.value in str(err.value)
    with pytest.raises(UndeclaredError, match="derived"):
        metrics.figure_once(0, 1, figure, 0.5)
    assert metrics.turns() == ()


def test_the_derived_figures_are_the_five_computed_ones():
    assert {f for f in Figure if f.derived} == {Figure.VOICE_TO_VOICE_S, Figure.SILENCE_WAIT_S,
                                                Figure.ENGINE_OVERHEAD_S, Figure.TTS_RTF,
                                                Figure.COMMIT_WAIT_S}


# ---------------------------------------------------------------- recording


def test_the_first_mark_wins_unless_overwritten():
    metrics = Metrics()
    metrics.mark(0, 1, Mark.STT_START, 1.0)
    metrics.mark(0, 1, Mark.STT_START, 2.0)
    assert metrics.turn(0, 1).marks[Mark.STT_START] == 1.0
    metrics.mark(0, 1, Mark.STT_START, 3.0, overwrite=True)
    assert metrics.turn(0, 1).marks[Mark.STT_START] == 3.0


def test_figures_are_set_added_or_recorded_once():
    metrics = Metrics()
    metrics.figure(0, 1, Figure.TTS_COMPUTE_S, 0.25)
    metrics.figure(0, 1, Figure.TTS_COMPUTE_S, 0.5, add=True)
    assert metrics.turn(0, 1).value(Figure.TTS_COMPUTE_S) == 0.75
    metrics.figure(0, 1, Figure.TTS_COMPUTE_S, 0.125)
    assert metrics.turn(0, 1).value(Figure.TTS_COMPUTE_S) == 0.125
    assert metrics.figure_once(0, 1, Figure.STT_COMPUTE_S, 0.5)
    assert not metrics.figure_once(0, 1, Figure.STT_COMPUTE_S, 0.75)
    assert metrics.turn(0, 1).value(Figure.STT_COMPUTE_S) == 0.5


def test_turns_are_kept_per_unit_and_the_oldest_forgotten():
    metrics = Metrics(keep_turns=3)
    for turn in range(1, 5):
        metrics.mark(0, turn, Mark.SPEECH_END, float(turn))
    metrics.mark(1, 4, Mark.SPEECH_END, 40.0)
    assert [(r.unit, r.turn_id) for r in metrics.turns()] == [(0, 3), (0, 4), (1, 4)]
    assert metrics.turn(0, 1) is None
    assert metrics.turn(0, 4).marks[Mark.SPEECH_END] == 4.0
    assert metrics.turn(1, 4).marks[Mark.SPEECH_END] == 40.0


# ---------------------------------------------------------------- derived values


def test_value_derives_the_latencies_from_marks_and_figures():
    record = _full_turn(Metrics())
    assert record.value(Figure.VOICE_TO_VOICE_S) == 1.0  # 11.0 - 10.0
    assert record.voice_to_voice == 1.0
    assert record.value(Figure.SILENCE_WAIT_S) == 0.25  # VAD_END - SPEECH_END
    assert record.value(Figure.TTS_RTF) == 0.25  # 0.5 s compute for 2 s of audio
    # The critical path's (engine.pipeline.critical_path): no stage start is marked here,
    # so no hand-off is measured; the commit (10.5) came before the reply was ready.
    assert record.value(Figure.ENGINE_OVERHEAD_S) == 0.0
    assert record.value(Figure.COMMIT_WAIT_S) == 0.0
    assert record.value(Figure.STT_COMPUTE_S) == 0.125  # recorded ones are read back
    assert record.value(Figure.LLM_HISTORY_TURNS) is None  # not measured


def test_silence_wait_falls_back_to_the_commit_without_a_vad_end():
    metrics = Metrics()
    metrics.mark(0, 1, Mark.SPEECH_END, 10.0)
    metrics.mark(0, 1, Mark.COMMITTED, 10.75)
    assert metrics.turn(0, 1).value(Figure.SILENCE_WAIT_S) == 0.75


def test_derived_values_are_none_where_a_part_is_missing():
    metrics = Metrics()
    metrics.mark(0, 1, Mark.SPEECH_END, 10.0)
    metrics.mark(0, 1, Mark.VAD_END, 10.25)
    metrics.figure(0, 1, Figure.TTS_COMPUTE_S, 0.5)
    record = metrics.turn(0, 1)
    assert record.value(Figure.VOICE_TO_VOICE_S) is None  # nothing heard
    assert record.value(Figure.ENGINE_OVERHEAD_S) is None
    assert record.value(Figure.TTS_RTF) is None  # no audio length
    metrics.figure(0, 1, Figure.TTS_AUDIO_S, 0.0)
    assert metrics.turn(0, 1).value(Figure.TTS_RTF) is None  # no audio made: no ratio
    metrics.mark(0, 1, Mark.AUDIO_OUT_FIRST, 11.0)
    # A heard reply has a critical path: missing marks add nothing, their time goes on.
    assert metrics.turn(0, 1).value(Figure.ENGINE_OVERHEAD_S) == 0.0
    assert Metrics().turn(0, 9) is None


def test_the_timeline_is_in_mark_order_relative_to_the_end_of_speech():
    record = _full_turn(Metrics())
    timeline = record.timeline()
    assert list(timeline) == ["speech_start", "speech_end", "vad_end", "committed", "stt_done",
                              "audio_out_first", "reply_done"]
    assert list(timeline) == [m.value for m in Mark if m in record.marks]
    assert timeline == {"speech_start": -1.5, "speech_end": 0.0, "vad_end": 0.25,
                        "committed": 0.5, "stt_done": 0.75, "audio_out_first": 1.0,
                        "reply_done": 3.0}


def test_no_timeline_without_the_end_of_speech():
    metrics = Metrics()
    metrics.mark(0, 1, Mark.SPEECH_START, 1.0)
    assert metrics.turn(0, 1).timeline() == {}


# ---------------------------------------------------------------- revisions


def test_writes_of_an_older_generation_after_reset_turn_work_are_ignored():
    metrics = Metrics()
    metrics.mark(0, 1, Mark.SPEECH_START, 1.0, generation=0)
    metrics.mark(0, 1, Mark.SPEECH_END, 2.0, generation=0)
    metrics.figure(0, 1, Figure.STT_COMPUTE_S, 0.5, generation=0)
    metrics.set_transcript(0, 1, "what time", generation=0)
    metrics.add_reply(0, 1, "It is", generation=0)

    metrics.reset_turn_work(0, 1, generation=2)
    record = metrics.turn(0, 1)
    assert record.marks == {Mark.SPEECH_START: 1.0}  # the turn still started then
    assert record.transcript == "" and record.reply == ""
    assert record.figures == {Figure.DROPPED_REVISIONS: 1}

    # The dropped revision's late writers change nothing...
    metrics.mark(0, 1, Mark.STT_DONE, 3.0, generation=1)
    metrics.figure(0, 1, Figure.STT_COMPUTE_S, 0.75, generation=1)
    assert not metrics.figure_once(0, 1, Figure.LLM_TOKENS, 9, generation=1)
    metrics.set_transcript(0, 1, "what time", generation=1)
    metrics.add_reply(0, 1, "It is", generation=1)
    assert metrics.turn(0, 1) == record
    # ...the new revision's (and unversioned) writes count.
    metrics.mark(0, 1, Mark.SPEECH_END, 4.0, generation=2)
    metrics.set_transcript(0, 1, "what time is it", generation=2)
    metrics.add_reply(0, 1, "Noon.", generation=3)
    assert metrics.figure_once(0, 1, Figure.LLM_TOKENS, 2, generation=2)
    metrics.mark(0, 1, Mark.REPLY_DONE, 5.0)
    record = metrics.turn(0, 1)
    assert record.marks == {Mark.SPEECH_START: 1.0, Mark.SPEECH_END: 4.0, Mark.REPLY_DONE: 5.0}
    assert record.transcript == "what time is it" and record.reply == "Noon."
    assert record.figures[Figure.LLM_TOKENS] == 2


def test_each_dropped_revision_is_counted():
    metrics = Metrics()
    metrics.reset_turn_work(0, 1, generation=1)
    metrics.reset_turn_work(0, 1, generation=2)
    assert metrics.turn(0, 1).value(Figure.DROPPED_REVISIONS) == 2
    assert turn_dict(metrics.turn(0, 1))["dropped_revisions"] == 2


# ---------------------------------------------------------------- the per-turn writer


def test_a_turn_writer_writes_to_its_own_unit_and_turn_only():
    metrics = Metrics()
    metrics.for_turn(0, 1).mark(Mark.SPEECH_END, 1.0)
    metrics.for_turn(1, 1).mark(Mark.SPEECH_END, 2.0)
    writer = metrics.for_turn(0, 2, generation=0)
    writer.mark(Mark.SPEECH_END, 3.0)
    writer.figure(Figure.STT_COMPUTE_S, 0.25)
    writer.figures({Figure.STT_NETWORK_S: 0.125, Figure.STT_HEADERS_S: 0.0625})
    writer.set_transcript("bonjour", language="fr")
    writer.add_reply("Salut ")
    writer.add_reply("!")
    assert metrics.turn(0, 1).marks == {Mark.SPEECH_END: 1.0} and metrics.turn(0, 1).figures == {}
    assert metrics.turn(1, 1).marks == {Mark.SPEECH_END: 2.0}
    record = metrics.turn(0, 2)
    assert (record.unit, record.turn_id) == (0, 2) and record.marks == {Mark.SPEECH_END: 3.0}
    assert record.figures == {Figure.STT_COMPUTE_S: 0.25, Figure.STT_NETWORK_S: 0.125,
                              Figure.STT_HEADERS_S: 0.0625}
    assert (record.transcript, record.language, record.reply) == ("bonjour", "fr", "Salut !")


def test_a_turn_writer_keeps_the_first_mark_unless_told_to_overwrite():
    metrics = Metrics()
    writer = metrics.for_turn(0, 1, generation=0)
    writer.mark(Mark.LLM_START, 1.0)
    writer.mark(Mark.LLM_START, 2.0)
    assert metrics.turn(0, 1).marks[Mark.LLM_START] == 1.0
    writer.mark(Mark.LLM_START, 3.0, overwrite=True)
    assert metrics.turn(0, 1).marks[Mark.LLM_START] == 3.0


def test_a_turn_writer_sets_adds_or_records_a_figure_once():
    metrics = Metrics()
    writer = metrics.for_turn(0, 1, generation=0)
    writer.add(Figure.QUEUE_WAIT_S, 0.25)  # nothing yet: counts from zero
    writer.add(Figure.QUEUE_WAIT_S, 0.5)
    assert metrics.turn(0, 1).value(Figure.QUEUE_WAIT_S) == 0.75
    writer.figure(Figure.QUEUE_WAIT_S, 0.125)  # replaces the sum
    assert metrics.turn(0, 1).value(Figure.QUEUE_WAIT_S) == 0.125
    assert writer.figure_once(Figure.TTS_FIRST_COMPUTE_S, 0.5)
    assert not writer.figure_once(Figure.TTS_FIRST_COMPUTE_S, 0.75)
    assert metrics.turn(0, 1).value(Figure.TTS_FIRST_COMPUTE_S) == 0.5


def test_a_turn_writer_of_a_dropped_revision_writes_nothing():
    metrics = Metrics()
    old = metrics.for_turn(0, 1, generation=0)
    old.mark(Mark.SPEECH_START, 1.0)
    old.mark(Mark.STT_DONE, 2.0)
    metrics.reset_turn_work(0, 1, generation=1)  # the user went on: revision 1 replaces it
    before = metrics.turn(0, 1)
    old.mark(Mark.LLM_START, 3.0, overwrite=True)
    old.figure(Figure.LLM_TOKENS, 9)
    old.add(Figure.QUEUE_WAIT_S, 0.5)
    assert not old.figure_once(Figure.TTS_FIRST_COMPUTE_S, 0.5)
    old.set_transcript("what time")
    old.add_reply("It is")
    assert metrics.turn(0, 1) == before
    assert before.marks == {Mark.SPEECH_START: 1.0}
    # The new revision's writer, and the turn's own bookkeeping (no generation), count.
    metrics.for_turn(0, 1, generation=1).mark(Mark.STT_DONE, 4.0)
    metrics.for_turn(0, 1).mark(Mark.COMMITTED, 5.0)
    assert metrics.turn(0, 1).marks == {Mark.SPEECH_START: 1.0, Mark.STT_DONE: 4.0,
                                        Mark.COMMITTED: 5.0}


def test_a_turn_writer_refuses_undeclared_names():
    writer = Metrics().for_turn(0, 1)
    with pytest.raises(UndeclaredError):
        writer.mark("speech_end", 1.0)  # type: ignore[arg-type]
    with pytest.raises(UndeclaredError, match="derived"):
        writer.add(Figure.VOICE_TO_VOICE_S, 1.0)


@pytest.mark.parametrize("cls", [Metrics, TurnMetrics])
def test_every_flag_of_a_metrics_write_is_keyword_only(cls):
    positional = [f"{name}({p.name})" for name, fn in inspect.getmembers(cls, inspect.isfunction)
                  for p in inspect.signature(fn).parameters.values()
                  if p.annotation == "bool" and p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == []


ROOT = Path(__file__).resolve().parents[2]
WRITES = {"mark", "figure", "add", "figure_once"}


def positional_flags(source: str) -> list[int]:
    """The lines of ``source`` where a ``mark``/``figure``/``add``/``figure_once`` call passes
    ``True`` or ``False`` as a positional argument (it reads as "overwrite" in one and "add"
    in the other: the flags are keyword-only)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in WRITES
                  and any(isinstance(arg, ast.Constant) and isinstance(arg.value, bool)
                          for arg in node.args))


def test_the_flag_reader_finds_a_positional_bool():
    source = ("metrics.mark(0, 1, Mark.LLM_START, 1.0, True, gen)\n"
              "turn.add(Figure.QUEUE_WAIT_S, 0.5)\n"
              "metrics.figure(0, 1, Figure.TTS_AUDIO_S, 1.0, add=True)\n"
              "turn.figure(Figure.TTS_AUDIO_S, False)\n")
    assert positional_flags(source) == [1, 4]


def test_no_metrics_write_passes_a_positional_flag():
    found = [f"{path.relative_to(ROOT)}:{line}" for package in ("engine", "app", "tests")
             for path in sorted((ROOT / package).rglob("*.py"))
             for line in positional_flags(path.read_text(encoding="utf-8"))]
    assert found == []


# ---------------------------------------------------------------- turn_dict


def test_turn_dict_keys_are_the_json_contract_in_order():
    # The keys users had stay first and in order; newer figures may only follow them.
    keys = list(turn_dict(_full_turn(Metrics())))
    assert keys[:len(REPORT_KEYS)] == REPORT_KEYS
    newer = [f.value for f in Figure if f.report and f.value not in REPORT_KEYS]
    assert keys[len(REPORT_KEYS):] == [*newer, "language", "critical_path"]
    empty = Metrics()
    empty.mark(0, 7, Mark.SPEECH_START, 1.0)
    assert list(turn_dict(empty.turn(0, 7))) == keys


def test_turn_dict_values():
    metrics = Metrics()
    _full_turn(metrics, unit=0, turn=3)
    metrics.set_cancelled(0, 3)
    out = turn_dict(metrics.turn(0, 3))
    assert out["turn_id"] == 3
    assert out["transcript"] == "what time is it"
    assert out["reply"] == "It is noon."
    assert out["cancelled"] is True
    assert out["timeline"] == metrics.turn(0, 3).timeline()
    assert out["voice_to_voice_s"] == 1.0
    assert out["silence_wait_s"] == 0.25
    assert out["stt_compute_s"] == 0.125
    assert out["llm_first_chunk_compute_s"] == 0.25
    assert out["tts_first_compute_s"] == 0.0625
    assert out["engine_overhead_s"] == 0.0
    assert out["critical_path"]["silence_wait_s"] == 0.25
    assert sum(out["critical_path"].values()) == out["voice_to_voice_s"]
    assert out["llm_tokens_per_s"] == 12.35  # rates: 2 digits
    assert out["stt_rtf"] == 0.1235  # ratios: 4 digits
    assert out["tts_rtf"] == 0.25
    for key in ("llm_tokens", "llm_prompt_tokens", "dropped_revisions"):
        assert type(out[key]) is int, key
    assert (out["llm_tokens"], out["llm_prompt_tokens"], out["dropped_revisions"]) == (42, 118, 0)


def test_turn_dict_of_an_unmeasured_turn_has_nones_and_zero_counts():
    metrics = Metrics()
    metrics.mark(0, 1, Mark.SPEECH_START, 1.0)
    out = turn_dict(metrics.turn(0, 1))
    assert out["timeline"] == {}
    assert out["cancelled"] is False
    for figure in Figure:
        if figure.report:
            expected = 0 if figure.unit is UnitOfMeasure.COUNT else None
            assert out[figure.value] == expected, figure


# ---------------------------------------------------------------- bench


def _bench_turn(v2v: float | None, cancelled: bool = False, **more) -> dict:
    return {"voice_to_voice_s": v2v, "cancelled": cancelled, **more}


def test_bench_summary_percentiles_over_turns_without_the_cancelled():
    turns = [_bench_turn(1.25, stt_rtf=0.5), _bench_turn(0.5), _bench_turn(2.0, stt_rtf=0.25),
             _bench_turn(9.0, cancelled=True, stt_rtf=8.0), _bench_turn(None),
             _bench_turn(0.75), _bench_turn(1.0)]
    summary = bench_summary(turns)
    assert list(summary) == [f.value for f in BENCH_FIGURES]
    # 0.5, 0.75, 1.0, 1.25, 2.0: p95 is 1.25 + 0.8 * 0.75
    assert summary["voice_to_voice_s"] == {"n": 5, "p50": 1.0, "p95": 1.85, "min": 0.5, "max": 2.0}
    assert summary["stt_rtf"] == {"n": 2, "p50": 0.375, "p95": 0.4875, "min": 0.25, "max": 0.5}
    assert summary["tts_rtf"] == {"n": 0, "p50": None, "p95": None, "min": None, "max": None}


def test_bench_summary_of_real_turn_dicts():
    metrics = Metrics()
    _full_turn(metrics, turn=1)
    _full_turn(metrics, turn=2)
    metrics.mark(0, 2, Mark.AUDIO_OUT_FIRST, 12.0, overwrite=True)  # v2v 2.0
    summary = bench_summary([turn_dict(r) for r in metrics.turns()])
    assert summary["voice_to_voice_s"] == {"n": 2, "p50": 1.5, "p95": 1.95, "min": 1.0, "max": 2.0}
    assert summary["tts_rtf"]["n"] == 2 and summary["tts_rtf"]["p50"] == 0.25


def test_format_bench_has_one_row_per_bench_figure():
    summary = bench_summary([_bench_turn(1.0), _bench_turn(0.5)])
    lines = format_bench(summary).splitlines()
    assert len(lines) == 1 + len(BENCH_FIGURES)
    assert lines[0].split() == ["figure", "n", "p50", "p95", "min", "max"]
    for line, figure in zip(lines[1:], BENCH_FIGURES):
        assert line.startswith(figure.label), (line, figure)
    v2v = lines[1 + BENCH_FIGURES.index(Figure.VOICE_TO_VOICE_S)]
    assert v2v[32:].split() == ["2", "750.0", "ms", "975.0", "ms", "500.0", "ms", "1000.0", "ms"]
    empty = lines[1 + BENCH_FIGURES.index(Figure.TTS_RTF)]
    assert empty[32:].split() == ["0", "-", "-", "-", "-"]


def test_the_bench_figures_are_the_bench_members_in_order():
    assert BENCH_FIGURES == (Figure.VOICE_TO_VOICE_S, Figure.SILENCE_WAIT_S, Figure.STT_COMPUTE_S,
                             Figure.LLM_FIRST_CHUNK_COMPUTE_S, Figure.TTS_FIRST_COMPUTE_S,
                             Figure.ENGINE_OVERHEAD_S, Figure.LLM_TOKENS_PER_S, Figure.STT_RTF,
                             Figure.TTS_RTF, Figure.COMMIT_WAIT_S)
