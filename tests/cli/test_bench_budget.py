"""``parley-cli bench`` prints the critical path of the median turn, per variant, on the
real bundled models: a row per part, and the parts add up to voice-to-voice."""

from __future__ import annotations

import json

import pytest

from engine.pipeline.critical_path import Segment
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow


def _budget(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("critical path of the median turn"))
    table = {"header": lines[start][40:].split()}
    for line in lines[start + 1:]:
        if line.startswith("("):
            break
        table[line[:40].strip()] = line[40:].split()
    return table


def test_bench_prints_the_budget_per_variant_and_it_adds_up(one_two_three_path):
    result = run_cli("bench", str(one_two_three_path), "--runs", "1",
                     "--compare", "tts.first_clause_words=0,3", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    table = _budget(result.stdout)
    assert table["header"] == ["tts.first_clause_words=0", "tts.first_clause_words=3"]
    for segment in Segment:
        assert len(table[segment.label]) == 2, segment
    for column in (0, 1):
        parts = sum(float(table[segment.label][column]) for segment in Segment)
        # Each part is rounded to 0.1 ms in the table.
        assert parts == pytest.approx(float(table["= voice-to-voice"][column]), abs=0.6)
        assert all(float(table[segment.label][column]) >= 0 for segment in Segment)
        assert float(table["silence wait (VAD end of speech)"][column]) > 0
        assert float(table["STT (final segment)"][column]) > 0
    assert "not a remainder" in " ".join(result.stdout.split())


def test_bench_json_carries_the_median_turns_budget(one_two_three_path):
    result = run_cli("bench", str(one_two_three_path), "--runs", "1", "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (variant,) = json.loads(result.stdout)["variants"]
    budget = variant["budget"]
    assert list(budget) == [s.value for s in Segment]
    turns = [t for run in variant["turns"] for t in run]
    median = next(t for t in turns if t["critical_path"] == budget)
    assert sum(budget.values()) == pytest.approx(median["voice_to_voice_s"], abs=1e-3)
