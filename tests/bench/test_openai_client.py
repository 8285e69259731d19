"""``bench serve --client-library openai``: the URLs the library is given and the flag,
checked before any server starts. The client itself runs every client test of
test_bench_serve against its fake Realtime server (the ``client_type`` fixture)."""

from __future__ import annotations

import pytest

from engine.bench.clients import BenchRunError
from engine.bench.openai_client import OpenAIRealtimeClient, split_url
from engine.bench.serve import build_parser, make_plan
from engine.cli.main import add_config_flags

pytest.importorskip("openai")


def test_urls_for_the_library():
    assert split_url("ws://h:1/v1/realtime") == ("http://h:1/v1", "ws://h:1/v1")
    assert split_url("wss://h:1/v1/realtime/") == ("https://h:1/v1", "wss://h:1/v1")
    with pytest.raises(BenchRunError, match=r"ws\(s\)://HOST:PORT/v1/realtime URL, got 'http://h/x'"):
        split_url("http://h/x")


def test_the_flag_picks_the_client_and_is_refused_with_load():
    parser = build_parser(add_config_flags)
    plan = make_plan(parser.parse_args(["--client-library", "openai", "--units", "1", "--clients", "1"]))
    assert plan.client_type is OpenAIRealtimeClient and plan.client_library == "openai"
    from engine.bench.serve import make_load_plan
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="--client-library: not used with --load"):
        make_load_plan(build_parser(add_config_flags).parse_args(["--load", "--client-library", "openai"]))
    with pytest.raises(SystemExit):
        build_parser(add_config_flags).parse_args(["--client-library", "websockets"])
