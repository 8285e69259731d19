"""``parley-cli bench lost-turns``: its arguments, its CPU burners, and one real stress run on
the offline stack: no committed turn may be lost (before the fix of ``SttStage.is_stale``,
two turns of every three-question session were: cut by the next question before their
transcript was out, they were never transcribed)."""

from __future__ import annotations

import json
import time

import pytest

from engine.bench.lost_turns import cpu_burners, main
from engine.bench.spoken_turns import load_questions, load_run
from engine.cli.main import add_config_flags
from tests.support.cli import run_cli


@pytest.mark.parametrize("argv, message", [
    (["--clients", "0"], "--clients must be from 1 to 16; got 0"),
    (["--repeats", "0"], "--repeats must be at least 1; got 0"),
    (["--burners", "-1"], "--burners must be from 0 to 16; got -1"),
    (["--turn-timeout", "0"], "--turn-timeout must be a positive number of seconds; got 0.0"),
    (["--llm-temperature", "9"], "'llm.temperature' must be between"),
])
def test_bad_arguments_are_refused_before_a_server_starts(argv, message, capsys):
    assert main(argv, add_config_flags) == 2
    assert message in capsys.readouterr().err


def test_burners_keep_cores_busy_for_a_bounded_time_and_are_reaped():
    import psutil

    with cpu_burners(2, seconds=30) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        deadline = time.monotonic() + 20  # a loaded machine gives them their share slowly
        busy = [0.0]
        while time.monotonic() < deadline:
            busy = [psutil.Process(p.pid).cpu_times().user for p in procs]
            if all(user > 0.2 for user in busy):
                break
            time.sleep(0.1)
        assert all(user > 0.2 for user in busy), busy
    assert all(p.returncode is not None for p in procs)  # terminated on leaving
    with cpu_burners(1, seconds=0.2) as procs:
        procs[0].wait(10)  # and they end by themselves
        assert procs[0].returncode == 0


def test_the_questions_are_the_bundled_turns_and_the_run_holds_three():
    questions = load_questions()
    assert len(questions) == 7 and all(1.0 < q.duration_s < 8.0 for q in questions)
    run, turns = load_run()
    assert turns == 3 and run.duration_s > 10.0


@pytest.mark.slow
def test_no_turn_is_lost_under_load_on_the_offline_stack():
    result = run_cli("bench", "lost-turns", "--clients", "2", "--repeats", "1", "--json", timeout=600)
    doc = json.loads(result.stdout)
    assert doc["lost"] == 0, (doc["lost_turns"], doc.get("server_output_tail"))
    assert result.returncode == 0 and doc["session_errors"] == []
    assert doc["turns"] >= 10  # 2 clients x (3 questions + 1 + 2)
    assert doc["barge_in"] >= 2  # each session's barge-in, and the run's quick questions
    assert doc["answered"] + doc["barge_in"] == doc["turns"] and doc["burners"] == 2
    assert "Traceback" not in result.stderr
