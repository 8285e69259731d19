"""``parley-cli bench soak --server``: arguments, the verdict and report on a made-up result,
and a short real soak through ``parley-cli serve`` on the offline stack."""

from __future__ import annotations

import argparse
import json

import pytest

from engine.bench.server_soak import build_parser, check_args, format_report, passed, server_flags
from engine.bench.soak import main
from engine.cli.main import add_config_flags
from tests.support.cli import run_cli

MIB = 2**20


@pytest.mark.parametrize("argv, message", [
    (["--units", "0"], "--units must be from 1 to 64; got 0"),
    (["--clients", "0"], "--clients must be from 1 to 256; got 0"),
    (["--turns", "1"], "--turns must be at least 2; got 1"),
    (["--turns", "10", "--warmup", "10"], "--warmup must be from 1 to --turns - 1 (9); got 10"),
    (["--turn-timeout", "-1"], "--turn-timeout must be a positive number of seconds"),
])
def test_bad_arguments_are_refused_before_a_server_starts(argv, message, capsys):
    assert main(["--server", *argv], add_config_flags) == 2
    assert message in capsys.readouterr().err


def _args(*argv: str) -> argparse.Namespace:
    args = build_parser(add_config_flags).parse_args(["--server", *argv])
    check_args(args)
    return args


def test_defaults_one_client_per_unit_a_bounded_warmup_and_short_replies():
    args = _args("--units", "4")
    assert (args.server_units, args.clients, args.turns, args.warmup) == (4, 4, 2000, 100)
    assert _args("--turns", "40").warmup == 8
    # --units is the server's size, never passed to serve as the engine's --units.
    assert server_flags(args) == ["--llm-max-new-tokens", "24"]
    assert server_flags(_args("--llm-max-new-tokens", "40")) == ["--llm-max-new-tokens", "40"]


def _doc(lost: int = 0, end_rss: int = 800 * MIB, end_threads: int = 12) -> dict:
    base = {"rss_bytes": 800 * MIB, "threads": 12, "fds": 10}
    end = {"rss_bytes": end_rss, "threads": end_threads, "fds": 10}
    growth = (end_rss - base["rss_bytes"]) / base["rss_bytes"]
    return {
        "units": 4, "clients": 4, "seed": 0, "sessions": 30, "refused_connections": 2,
        "warmup_turns": 12,
        "steps": {"ask": 60, "barge_in": 20, "drop": 20},
        "dropped_while": {"speaking": 10, "replying": 10}, "turns": 100, "answered": 70,
        "barge_in": 20, "dropped": 10 - lost, "lost": lost,
        "lost_why": {"never answered": lost} if lost else {}, "session_errors_total": 0,
        "session_errors": [], "soak_s": 600.0, "wall_s": 700.0, "seconds_per_turn": 6.8,
        "server": {"after_warmup": base, "end": end, "rss_growth": growth, "rss_growth_limit": 0.01,
                   "rss_within_limit": growth <= 0.01, "threads_flat": end_threads == 12,
                   "fds_flat": True, "threads_range": {"min": 12, "max": 30},
                   "fds_range": {"min": 10, "max": 22}, "rss_peak_bytes": 900 * MIB}}


def test_the_verdict_needs_no_lost_turn_flat_threads_and_rss_within_one_percent():
    assert passed(_doc())
    assert not passed(_doc(lost=1))
    assert not passed(_doc(end_rss=int(800 * MIB * 1.02)))
    assert not passed(_doc(end_threads=13))
    text = format_report(_doc(lost=1))
    assert "turns committed: 100 (12 in the warm-up): 70 answered, 20 barge_in, 9 dropped, 1 lost" in text
    assert "lost x1: never answered" in text
    assert "server RSS after warm-up 800.0 MiB, at the end 800.0 MiB (+0.00 %, within the 1 % limit)" in text
    assert "threads after warm-up 12, at the end 12 (flat), during 12..30" in text
    assert text.endswith("verdict: FAIL")


@pytest.mark.slow
def test_a_short_soak_through_the_server_loses_no_turn():
    result = run_cli("bench", "soak", "--server", "--units", "2", "--turns", "12", "--warmup", "4",
                     "--json", timeout=600)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert doc["turns"] >= 12 and doc["lost"] == 0, doc["lost_turns"]
    assert doc["session_errors_total"] == 0, doc["session_errors"]
    assert doc["answered"] + doc["barge_in"] + doc["dropped"] == doc["turns"]
    server = doc["server"]
    for key in ("after_warmup", "end"):
        assert server[key]["rss_bytes"] > 100 * MIB and server[key]["threads"] > 3
        assert server[key]["fds"] > 2
    assert server["samples"] and result.returncode == (0 if doc["lost"] == 0 and server["rss_within_limit"]
                                                         and server["threads_flat"] and server["fds_flat"]
                                                         else 1)
