"""``parley-cli bench soak``: its arguments, its source, its report, and short real soaks
(every turn answered: exit 0; a turn that fails: exit 1, and which one)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from engine.bench import soak as bench_soak
from engine.bench.soak import SoakSource, format_report, main
from tests.support.faults import FaultyLlm, injected
from tests.support.threads import parley_threads


@pytest.mark.parametrize(("argv", "message"), [
    (["--turns", "0"], "--turns must be at least 1; got 0"),
    (["--turns", "-3"], "--turns must be at least 1; got -3"),
    (["--turns", "2", "--turn-timeout", "0"], "--turn-timeout must be > 0; got 0.0"),
])
def test_bad_arguments_are_refused_before_anything_loads(argv, message, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"parley-cli: error: {message}"


def test_a_word_for_turns_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--turns", "many"])
    assert info.value.code == 2 and "invalid int value: 'many'" in capsys.readouterr().err


def test_engine_flags_override_the_soak_defaults():
    from engine.bench.soak import build_parser, soak_config
    from engine.cli.main import add_config_flags

    args = build_parser(add_config_flags).parse_args(
        ["--turns", "7", "--turns-speculative", "true", "--llm-max-new-tokens", "30"])
    config = soak_config(args)
    assert args.turns == 7 and config.turns.speculative and config.llm.max_new_tokens == 30
    assert config.turns.barge_in.value == "off"  # the soak's own default, not overridden
    plain = soak_config(build_parser().parse_args([]))
    assert not plain.turns.speculative and plain.llm.max_new_tokens == 24


def test_the_source_gives_each_recording_once_released_and_stays_open():
    a, b = np.full(1000, 0.1, np.float32), np.full(600, 0.2, np.float32)
    source = SoakSource([a, b], turns=3, silence_s=0.05, block_samples=512)
    source.open()
    assert source.read(0.01) is None and not source.finished  # not released yet
    delivered = []
    for k in range(3):
        source.release(k)
        blocks = []
        while not source.delivered(k).is_set():
            block = source.read(0.5)
            assert block is not None
            blocks.append(block.samples)
        delivered.append(np.concatenate(blocks))
        assert source.read(0.01) is None  # the next one waits for its release
    assert [round(float(d.max()), 1) for d in delivered] == [0.1, 0.2, 0.1]
    assert delivered[0].size == 1000 + 800  # the recording, then its silence
    assert not source.finished  # a live source until closed: the pipeline stays as it is
    t = time.monotonic()
    assert source.read(0.2) is None  # all given: it waits like a silent microphone, no spin
    assert time.monotonic() - t >= 0.15
    source.close()
    assert source.finished and source.read(0.01) is None


def _doc(turns: int, unanswered=()) -> dict:
    samples = [{"turn": t, "t": 3.0 * t, "seconds": 3.0, "answered": t not in unanswered,
                "rss_mib": 1000.0 + t, "threads": 17, "fds": 9} for t in range(1, turns + 1)]
    return {"turns": turns, "answered": turns - len(unanswered), "unanswered": list(unanswered),
            "wall_s": 3.0 * turns, "turn_s": {"p50": 3.0, "p95": 3.2, "max": 3.5},
            "rss_mib": {"baseline_turn": 50, "baseline": 1050.0, "end": 1000.0 + turns,
                        "growth": round(turns / 1050 - 50 / 1050, 4), "limit": 0.05,
                        "within_limit": True},
            "threads": {"min": 17, "max": 17, "flat": True}, "fds": {"min": 9, "max": 9, "flat": True},
            "max_queue_depth": {"vad": {"depth": 0, "capacity": 0}, "stt": {"depth": 1, "capacity": 8}},
            "snapshots": 1500, "errors": [], "errors_total": 0, "threads_not_stopped": [],
            "samples": samples}


def test_the_report_shows_the_turns_that_matter_and_the_verdicts():
    text = format_report(_doc(100, unanswered=[7]))
    rows = [line.split()[0] for line in text.splitlines()[1:] if line[:6].strip().isdigit()]
    assert rows == ["1", "10", "20", "30", "40", "50", "60", "70", "80", "90", "100"]
    assert "turns answered: 99 of 100 (not answered: 7)" in text
    assert "RSS: 1050.0 MiB at turn 50, 1100.0 MiB at the end (+4.76 %, within the 5 % limit)" in text
    assert "threads after turn 1: 17..17 (flat); open fds: 9..9 (flat)" in text
    assert "deepest queues (1500 snapshots): vad 0/0, stt 1/8" in text


@pytest.mark.slow
def test_a_short_soak_answers_every_turn_and_reports_flat_threads(capsys):
    assert main(["--turns", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["turns"] == 3 and doc["answered"] == 3 and doc["unanswered"] == []
    assert [s["turn"] for s in doc["samples"]] == [1, 2, 3]
    assert all(s["rss_mib"] > 100 and s["threads"] > 5 and s["fds"] > 2 for s in doc["samples"])
    assert doc["threads"]["flat"], doc["threads"]  # the pipeline keeps its threads to the end
    assert set(doc["max_queue_depth"]) == {"vad", "stt", "llm", "tts", "sink"}
    assert doc["snapshots"] > 0 and doc["errors_total"] == 0 and doc["threads_not_stopped"] == []
    assert doc["rss_mib"]["baseline_turn"] == 3  # a soak shorter than 50 turns: its last
    assert doc["settings"] == {"llm.max_new_tokens": "24", "turns.barge_in": "off",
                               "turns.speculative": "false"}
    assert parley_threads() == []


@pytest.mark.slow
def test_a_turn_that_fails_is_named_and_the_soak_exits_1(monkeypatch, capsys):
    import engine.recording

    real_load = engine.recording.load_engine

    def load_with_a_fault(*args, **kwargs):
        loaded = real_load(*args, **kwargs)
        loaded.models["llm"] = FaultyLlm(loaded.models["llm"], injected, on_calls=2)
        return loaded

    monkeypatch.setattr(engine.recording, "load_engine", load_with_a_fault)
    assert main(["--turns", "3", "--json"]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["answered"] == 2 and doc["unanswered"] == [2]
    assert doc["errors"] == ["llm: RuntimeError: injected fault"]
    assert "turn 2/3" in out.err and "NOT ANSWERED" in out.err
    assert parley_threads() == []
    assert bench_soak.PROG == "parley-cli bench soak"
