"""``bench serve --client-library openai``: the official ``openai`` library, unmodified, as
the benchmark's client, against the fake Realtime server of test_bench_serve (timing,
transcripts, errors) and with the arguments checked before any server starts."""

from __future__ import annotations

import asyncio

import pytest

from engine.bench.clients import BenchRunError, Utterance, concurrent_turns
from engine.bench.openai_client import OpenAIRealtimeClient, split_url
from engine.bench.serve import build_parser, free_port, make_plan
from engine.cli.main import add_config_flags
from tests.bench.test_bench_serve import _tone, _with_fake_server

pytest.importorskip("openai")


def test_the_openai_library_streams_and_times_the_reply_like_the_aiohttp_client():
    speech = Utterance.from_audio("tone", _tone(0.25), tail_s=0.1)

    async def body(url):
        return await concurrent_turns(url, speech, 2, timeout=10, client_type=OpenAIRealtimeClient)

    results = asyncio.run(_with_fake_server("ok", body))
    assert [r.client for r in results] == [0, 1]
    for result in results:
        # The fake answers once 0.3 s of audio has come: 0.1 s after the 0.2 s speech end.
        assert 0.0 < result.voice_to_voice_s < 0.5
        assert (result.transcript, result.reply, result.speech_end_source) == ("hello", "Hello there.",
                                                                                "server_vad")


@pytest.mark.parametrize("behaviour, fragment", [
    ("full", "client 0: server error: invalid_request_error (session_limit_reached)"),
    ("error", "client 0: server error: server_error (engine_error): stt: boom"),
    ("close", "client 0: the server closed the connection"),
    ("silent", "client 0: timed out after 1 s waiting for the reply to tone"),
])
def test_openai_client_failures_are_the_same_clear_errors(behaviour, fragment):
    speech = Utterance.from_audio("tone", _tone(0.25), tail_s=0.1)

    async def body(url):
        async with OpenAIRealtimeClient(url, connect_timeout=5) as client:
            return await client.turn(speech, client.clock(), timeout=1)

    with pytest.raises(BenchRunError) as err:
        asyncio.run(_with_fake_server(behaviour, body))
    assert fragment in str(err.value)


def test_nothing_listening_is_a_clear_error():
    async def body():
        async with OpenAIRealtimeClient(f"ws://127.0.0.1:{free_port()}/v1/realtime", connect_timeout=2):
            pass

    with pytest.raises(BenchRunError, match=r"client 0: cannot connect to ws://127\.0\.0\.1"):
        asyncio.run(body())


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
