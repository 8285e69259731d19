"""``parley-cli bench serve``: arguments, timing helpers, the report, the client against a
fake Realtime server, the server process wrapper, the load run (``--load``) against a fake
server that refuses both ways, and one real run of each on the offline stack."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import random
import sys
import time

import numpy as np
import pytest

from engine.bench import serve as bench_serve
from engine.bench.clients import (CLIENT_RATE, BenchRunError, SessionRefused, TurnTracker, Utterance,
                                  deadlines, retry_after, speech_end, speech_end_time, to_pcm16,
                                  turn_result)
from engine.bench.realtime_client import RealtimeClient, concurrent_turns
from engine.bench.load import LoadPlan, LoadStats, format_load_report, play_session, run_load
from engine.bench.serve import (ServerProcess, format_report, latency_summary, make_plan, parse_counts,
                                server_args)
from engine.cli.main import add_config_flags, build_parser, main
from engine.errors import ConfigError
from tests.support.cli import run_cli
from tests.support.transcripts import normalize


def _tone(seconds: float, rate: int = CLIENT_RATE, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


# -- arguments -------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [("1,2,4,8", [1, 2, 4, 8]), ("4, 1 ,2", [1, 2, 4]),
                                            ("64", [64])])
def test_counts_parse_and_sort(text, expected):
    assert parse_counts("--units", text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("", "comma-separated list"), (",", "comma-separated list"), ("1,,2", "comma-separated list"),
    ("0", "0 is out of range"), ("-1", "-1 is out of range"), ("65", "65 is out of range"),
    ("x", "'x' is not a whole number"), ("1.5", "'1.5' is not a whole number"),
    ("2,2", "2 is given twice")])
def test_bad_counts_name_the_flag_and_the_problem(text, fragment):
    with pytest.raises(ConfigError) as err:
        parse_counts("--units", text)
    assert "--units" in str(err.value) and fragment in str(err.value)


@pytest.fixture
def no_servers(monkeypatch):
    """Fail the test if anything tries to start a server."""
    def refuse(*args, **kwargs):
        raise AssertionError("a server was started")

    monkeypatch.setattr(bench_serve, "ServerProcess", refuse)


@pytest.mark.parametrize("flags, fragment", [
    (["--units", "0"], "--units '0': 0 is out of range"),
    (["--units", "1,two"], "'two' is not a whole number"),
    (["--clients", ""], "--clients '': expected a comma-separated list"),
    (["--clients", "0"], "--clients '0': 0 is out of range"),
    (["--runs", "0"], "--runs must be at least 1"),
    (["--turn-timeout", "0"], "--turn-timeout must be a positive number"),
    (["--port-base", "80"], "--port-base must be from 1024"),
    (["--input", "no/such.wav"], "no such file: no/such.wav"),
    (["--llm-temperature", "9"], "'llm.temperature' must be between"),
    (["--pipelines", "2"], "--pipelines: only with --load"),
    (["--duration", "5", "--seed", "1"], "--duration, --seed: only with --load"),
    (["--load", "--units", "1", "--runs", "2"], "--units, --runs: not used with --load"),
    (["--load", "--clients", "2,4"], "--clients '2,4': --load takes one count of clients"),
    (["--load", "--clients", "0"], "--clients '0': 0 is out of range"),
    (["--load", "--pipelines", "0"], "--pipelines must be from 1 to 64; got 0"),
    (["--load", "--duration", "0"], "--duration must be a positive number of seconds; got 0.0"),
    (["--load", "--retry-s", "-1"], "--retry-s must be a positive number of seconds"),
    (["--load", "--barge-input", "no/such.wav"], "no such file: no/such.wav"),
])
def test_bad_arguments_exit_2_before_any_server_starts(no_servers, capsys, flags, fragment):
    assert main(["bench", "serve", *flags]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_unknown_flag_is_an_argparse_error(no_servers, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "serve", "--bogus"])
    assert exc.value.code == 2
    assert "parley-cli bench serve" in capsys.readouterr().err


def test_bench_input_still_parses_as_before():
    args = build_parser().parse_args(["bench", "resources/audio/jfk.flac", "--runs", "2"])
    assert (args.command, args.input, args.runs) == ("bench", "resources/audio/jfk.flac", 2)


def test_engine_flags_pass_through_to_serve_and_units_means_server_sizes():
    parser = bench_serve.build_parser(add_config_flags)
    args = parser.parse_args(["--units", "1,2", "--llm-temperature", "0.5",
                              "--turns-speculative", "false"])
    assert args.unit_counts == "1,2"
    assert server_args(args) == ["--llm-temperature", "0.5", "--turns-speculative", "false"]
    plan = make_plan(args, ["--units", "1,2"])
    assert plan.units == [1, 2] and plan.clients == [1, 2, 4] and plan.runs == 3
    assert plan.servers == [1, 2, 4]  # no memory server of 4 units: the latency one is extra
    assert plan.speech.speech_samples == 11 * CLIENT_RATE  # jfk.flac, found in the checkout


def test_the_latency_phase_reuses_a_memory_server_of_its_size():
    args = bench_serve.build_parser(add_config_flags).parse_args(["--units", "4,1,2", "--clients", "2,4"])
    plan = make_plan(args)
    assert plan.servers == [1, 2, 4] and plan.latency_units == 4


# -- timing helpers --------------------------------------------------------------------

def test_speech_end_is_the_last_loud_frame():
    rate = CLIENT_RATE
    audio = np.concatenate([_tone(1.0), np.zeros(rate // 2, np.float32)])
    assert speech_end(audio, rate) == rate  # frames of 480 samples: 1.0 s is a frame boundary
    # noise 40 dB under the tone after it is not speech; 20 dB under is
    quiet = np.concatenate([_tone(1.0), _tone(0.5, amp=0.005)])
    assert speech_end(quiet, rate) == rate
    loud = np.concatenate([_tone(1.0), _tone(0.5, amp=0.05)])
    assert speech_end(loud, rate) == round(1.5 * rate)
    assert speech_end(np.zeros(1000, np.float32), rate) == 0
    assert speech_end(np.zeros(0, np.float32), rate) == 0
    odd = _tone(0.0105)  # a partial last frame still counts
    assert speech_end(odd, rate) == odd.size


def test_utterance_chunks_deadlines_and_the_chunk_of_the_speech_end():
    speech = Utterance.from_audio("tone", _tone(0.1), tail_s=0.05)
    assert speech.speech_samples == 2400 and speech.samples == 3600
    assert speech.speech_end_sample == 2400 and speech.speech_end_s == pytest.approx(0.1)
    chunks = speech.chunks()
    assert [len(c) for c in chunks] == [1920, 1920, 1920, 1440]  # 40 ms = 960 samples
    assert speech.speech_end_chunk() == 2  # sample 2399 is in chunk 2 (1920..2879)
    assert deadlines(10.0, chunks) == pytest.approx([10.04, 10.08, 10.12, 10.15])
    pcm = np.frombuffer(to_pcm16(np.array([0.0, 1.0, -1.0, 2.0], np.float32)), "<i2")
    assert pcm.tolist() == [0, 32767, -32767, 32767]
    with pytest.raises(Exception, match="silent"):
        Utterance.from_audio("silence", np.zeros(2400, np.float32))


def _delta(rid: str, samples: int = 240) -> dict:
    return {"type": "response.output_audio.delta", "response_id": rid,
            "delta": base64.b64encode(b"\0\0" * samples).decode()}


def _done(rid: str, status: str = "completed", v2v: float | None = 0.5) -> dict:
    return {"type": "response.done", "response": {
        "id": rid, "status": status, "status_details": {"type": status, "reason": None},
        "output": [{"content": [{"type": "output_audio", "transcript": "Hello there."}]}],
        "parley": {"voice_to_voice_s": v2v}}}


def _sent(speech: Utterance, start: float = 100.0) -> list[float]:
    return deadlines(start, speech.chunks())


def test_tracker_times_the_reply_from_the_servers_end_of_speech():
    speech = Utterance.from_audio("tone", _tone(1.0), tail_s=0.5)  # 38 chunks
    sent = _sent(speech)  # chunk i is sent at 100.04 + 0.04 i
    tracker = TurnTracker()
    events = [(100.5, {"type": "input_audio_buffer.speech_started", "audio_start_ms": 0}),
              (101.4, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 900}),
              (101.5, {"type": "conversation.item.input_audio_transcription.completed",
                       "transcript": "one two"}),
              (101.5, {"type": "response.created", "response": {"id": "r1"}}),
              (101.7, _delta("r1")), (101.8, _delta("r1")), (102.0, _done("r1"))]
    for t, event in events[:-1]:
        tracker.feed(t, event)
    end_t, end_s, source = speech_end_time(tracker, speech, sent)
    # 900 ms = sample 21600, the last sample of chunk 22, sent at 100.04 + 22 * 0.04
    assert (end_s, source) == (0.9, "server_vad") and end_t == pytest.approx(100.92)
    assert not tracker.complete(end_t)  # r1 is still going
    tracker.feed(*events[-1])
    assert tracker.complete(end_t)
    result = turn_result(3, tracker, speech, sent)
    assert result.voice_to_voice_s == pytest.approx(101.7 - 100.92)
    assert (result.client, result.transcript, result.reply) == (3, "one two", "Hello there.")
    assert result.reply_audio_s == pytest.approx(480 / CLIENT_RATE)
    assert result.server_voice_to_voice_s == 0.5 and result.early_responses == 0
    assert result.energy_speech_end_s == pytest.approx(1.0)
    assert json.loads(json.dumps(result.as_dict()))["speech_end_source"] == "server_vad"


def test_a_later_recording_of_the_session_is_timed_on_its_own_clock():
    speech = Utterance.from_audio("tone", _tone(1.0), tail_s=0.5)
    sent = _sent(speech, start=105.0)  # streamed 5 s after the session's first recording
    tracker = TurnTracker()
    tracker.feed(106.0, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 900})  # the first's
    assert speech_end_time(tracker, speech, sent, offset_s=5.0)[2] == "energy"  # not this one's yet
    tracker.feed(106.5, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 5900})
    end_t, end_s, source = speech_end_time(tracker, speech, sent, offset_s=5.0)
    assert (end_s, source) == (pytest.approx(0.9), "server_vad") and end_t == pytest.approx(105.92)


@pytest.mark.parametrize("stopped", [None, 0, 60_000])
def test_without_a_usable_speech_stopped_the_energy_end_is_used(stopped):
    speech = Utterance.from_audio("tone", _tone(1.0), tail_s=0.5)
    sent = _sent(speech)
    tracker = TurnTracker()
    if stopped is not None:
        tracker.feed(101.0, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": stopped})
    end_t, end_s, source = speech_end_time(tracker, speech, sent)
    assert (end_s, source) == (1.0, "energy") and end_t == pytest.approx(100.04 + 24 * 0.04)


def test_an_earlier_reply_still_speaking_is_not_the_one_timed():
    speech = Utterance.from_audio("tone", _tone(1.0), tail_s=0.5)
    sent = _sent(speech)
    tracker = TurnTracker()
    for t, event in [(100.5, _delta("early")), (101.2, _done("early")),
                     (101.3, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 1000}),
                     (101.6, _delta("late")), (101.9, _done("late"))]:
        tracker.feed(t, event)
    result = turn_result(0, tracker, speech, sent)
    assert result.early_responses == 1
    assert result.voice_to_voice_s == pytest.approx(101.6 - (100.04 + 24 * 0.04))


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_a_reply_that_did_not_complete_is_an_error(status):
    speech = Utterance.from_audio("tone", _tone(0.2), tail_s=0.1)
    tracker = TurnTracker()
    tracker.feed(101.0, _delta("r"))
    tracker.feed(101.1, _done("r", status))
    with pytest.raises(BenchRunError, match=f"client 2: the reply ended {status}"):
        turn_result(2, tracker, speech, _sent(speech))


def test_error_events_and_bad_audio_are_recorded():
    tracker = TurnTracker()
    tracker.feed(1.0, {"type": "error", "error": {"type": "invalid_request_error",
                                                  "code": "session_limit_reached", "message": "full"}})
    tracker.feed(1.0, {"type": "response.output_audio.delta", "response_id": "r", "delta": "@@@"})
    assert tracker.errors[0] == "invalid_request_error (session_limit_reached): full"
    assert "not base64" in tracker.errors[1]


# -- the report ------------------------------------------------------------------------

def test_latency_summary():
    assert latency_summary([1.0, 2.0, 3.0, 4.0]) == {"n": 4, "p50_s": 2.5, "p95_s": 3.85,
                                                     "min_s": 1.0, "max_s": 4.0}
    assert latency_summary([]) == {"n": 0, "p50_s": None, "p95_s": None, "min_s": None, "max_s": None}


def _fake_doc() -> dict:
    mib = 1024 * 1024
    rows = [{"units": n, "startup_rss_bytes": (1000 + n) * mib, "turn_rss_bytes": (1010 + 5 * n) * mib,
             "models": [{"stage": "llm", "model": "/x/SmolLM2.gguf", "device": "cpu"}]}
            for n in (1, 2, 8)]
    for row in rows:
        row["startup_ratio"] = round(row["startup_rss_bytes"] / rows[0]["startup_rss_bytes"], 3)
        row["turn_ratio"] = round(row["turn_rss_bytes"] / rows[0]["turn_rss_bytes"], 3)
    return {"silence_tail_s": 1.5, "wall_s": 321.4, "client_library": "openai",
            "memory": {"input": "a/one_two_three_44k.wav", "rows": rows,
                       "max_vs_min": {"units": [1, 8], "startup_ratio": rows[-1]["startup_ratio"],
                                      "turn_ratio": rows[-1]["turn_ratio"], "target": 1.2,
                                      "within_target": True}},
            "latency": {"input": "a/jfk.flac", "server_units": 4, "runs": 3,
                        "speech_end_sources": ["server_vad"],
                        "rows": [{"clients": c, **latency_summary(v), "p50_ratio": r}
                                 for c, v, r in ((1, [1.3, 1.4, 1.2], 1.0), (4, [2.6, 2.8, 3.1], 2.0))]}}


def test_report_table():
    text = format_report(_fake_doc())
    lines = text.splitlines()
    assert lines[0] == "models: llm SmolLM2.gguf (cpu)"
    assert "units  after start-up  x 1 unit  after 1 turn/unit  x 1 unit" in text
    assert "    8          1008.0     1.007             1050.0     1.034" in lines
    assert ("8 units vs 1: 1.01x after start-up, 1.03x after one turn per unit "
            "(within the 1.2x target)") in lines
    assert "found by the server's VAD" in text
    assert "jfk.flac at real time + 1.5 s silence (openai client)" in text
    assert "clients    n       p50       p95       min       max    p50 x 1" in lines
    assert "      1    3   1300 ms   1390 ms   1200 ms   1400 ms       1.00" in lines
    assert "      4    3   2800 ms   3070 ms   2600 ms   3100 ms       2.00" in lines
    assert lines[-1] == "wall time 321 s"


# -- the client against a fake server --------------------------------------------------

def _fake_server(behaviour: str):
    """An aiohttp app speaking just enough of the Realtime protocol: after `speech_ms` of
    appended audio it ends the turn and answers with two audio deltas."""
    from aiohttp import web

    async def realtime(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        if behaviour == "full":
            await ws.send_json({"type": "error", "error": {
                "type": "invalid_request_error", "code": "session_limit_reached",
                "message": "all 1 pipelines are in use; try again later"}})
            await ws.close()
            return ws
        await ws.send_json({"type": "session.created", "session": {}})
        received = 0
        answered = False
        async for msg in ws:
            event = json.loads(msg.data)
            if event["type"] == "session.update":
                await ws.send_json({"type": "session.updated", "session": {}})
            elif event["type"] == "input_audio_buffer.append":
                received += len(base64.b64decode(event["audio"])) // 2
                if behaviour == "error" and received > 2000:
                    await ws.send_json({"type": "error", "error": {"type": "server_error",
                                                                   "code": "engine_error",
                                                                   "message": "stt: boom"}})
                if behaviour == "close" and received > 2000:
                    await ws.close()
                if not answered and received >= 0.3 * CLIENT_RATE and behaviour == "ok":
                    answered = True
                    for payload in (
                            {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 200},
                            {"type": "conversation.item.input_audio_transcription.completed",
                             "transcript": "hello"},
                            {"type": "response.created", "response": {"id": "r1"}},
                            _delta("r1"), _delta("r1"), _done("r1")):
                        await ws.send_json(payload)
        return ws

    async def pool(request):
        return web.json_response({"num_pipelines": 1, "rss_bytes": 1, "units": [{"state": "free"}],
                                  "models": []})

    app = web.Application()
    app.router.add_get("/v1/realtime", realtime)
    app.router.add_get("/v1/pool", pool)
    return app


async def _with_fake_server(behaviour: str, body):
    from aiohttp import web

    runner = web.AppRunner(_fake_server(behaviour))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        return await body(f"ws://127.0.0.1:{port}/v1/realtime")
    finally:
        await runner.cleanup()


@pytest.fixture(params=["aiohttp", "openai"])
def client_type(request) -> type[RealtimeClient]:
    """Each client library ``bench serve --client-library`` offers: the built-in aiohttp
    one, and the official openai library unmodified (engine/bench/openai_client.py)."""
    if request.param == "aiohttp":
        return RealtimeClient
    pytest.importorskip("openai")
    from engine.bench.openai_client import OpenAIRealtimeClient

    return OpenAIRealtimeClient


def test_concurrent_clients_stream_at_real_time_and_time_the_reply(client_type):
    speech = Utterance.from_audio("tone", _tone(0.25), tail_s=0.1)

    async def body(url):
        return await concurrent_turns(url, speech, 2, timeout=10, client_type=client_type)

    results = asyncio.run(_with_fake_server("ok", body))
    assert [r.client for r in results] == [0, 1]
    for result in results:
        # the server answers once 0.3 s of audio has come: 0.1 s after the 0.2 s speech end
        assert 0.0 < result.voice_to_voice_s < 0.5
        assert (result.transcript, result.reply, result.speech_end_source) == ("hello", "Hello there.",
                                                                                "server_vad")


@pytest.mark.parametrize("behaviour, fragment", [
    ("full", "client 0: server error: invalid_request_error (session_limit_reached)"),
    ("error", "client 0: server error: server_error (engine_error): stt: boom"),
    ("close", "client 0: the server closed the connection"),
    ("silent", "client 0: timed out after 1 s waiting for the reply to tone"),
])
def test_client_failures_are_clear_errors(client_type, behaviour, fragment):
    speech = Utterance.from_audio("tone", _tone(0.25), tail_s=0.1)

    async def body(url):
        async with client_type(url, connect_timeout=5) as client:
            return await client.turn(speech, client.clock(), timeout=1)

    with pytest.raises(BenchRunError) as err:
        asyncio.run(_with_fake_server(behaviour, body))
    assert fragment in str(err.value)


def test_a_refused_connection_is_a_clear_error(client_type):
    from engine.bench.serve import free_port

    async def body():
        async with client_type(f"ws://127.0.0.1:{free_port()}/v1/realtime", connect_timeout=2):
            pass

    with pytest.raises(BenchRunError, match=r"client 0: cannot connect to ws://127\.0\.0\.1"):
        asyncio.run(body())


# -- the server process ----------------------------------------------------------------

def _script(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_server_process_waits_for_its_line_samples_rss_and_stops():
    server = ServerProcess(1, 0, [], command=_script(
        "import sys, time\nprint('loading', file=sys.stderr)\n"
        "print('serving on ws://127.0.0.1:1234/v1/realtime (1 pipeline)', file=sys.stderr, flush=True)\n"
        "time.sleep(60)\n"))
    try:
        assert server.start(timeout=30) == "ws://127.0.0.1:1234/v1/realtime"
        assert server.pool_url == "http://127.0.0.1:1234/v1/pool"
        assert server.rss() > 1024 * 1024
    finally:
        server.stop(timeout=10)
    assert server.proc.returncode is not None


def test_a_server_that_dies_or_never_serves_shows_its_output():
    dead = ServerProcess(2, 0, [], command=_script(
        "import sys\nprint('parley-cli: error: cannot listen', file=sys.stderr)\nsys.exit(2)\n"))
    with pytest.raises(BenchRunError) as err:
        dead.start(timeout=30)
    assert "exited with status 2 before it served" in str(err.value)
    assert "| parley-cli: error: cannot listen" in str(err.value)
    slow = ServerProcess(1, 0, [], command=_script("import time\nprint('still loading', flush=True)\n"
                                                   "time.sleep(60)\n"))
    try:
        with pytest.raises(BenchRunError, match=r"did not say 'serving on' within 1 s(.|\n)*still loading"):
            slow.start(timeout=1)
    finally:
        slow.stop(timeout=5)


# -- the real thing --------------------------------------------------------------------

@pytest.mark.slow
def test_bench_serve_on_the_offline_stack():
    result = run_cli("bench", "serve", "--units", "1,2", "--clients", "1", "--runs", "1", "--json",
                     timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    rows = doc["memory"]["rows"]
    assert [r["units"] for r in rows] == [1, 2]
    for row in rows:
        assert row["startup_rss_bytes"] > 100 * 1024 * 1024 and row["turn_rss_bytes"] > 0
        assert len(row["turns"]) == row["units"]
        assert all(t["voice_to_voice_s"] > 0 and t["reply"] for t in row["turns"])
        assert {m["stage"] for m in row["models"]} == {"vad", "stt", "llm", "tts"}
    assert rows[0]["startup_ratio"] == rows[0]["turn_ratio"] == 1.0
    assert doc["memory"]["max_vs_min"]["turn_ratio"] <= 1.2  # one set of models for both units
    latency = doc["latency"]
    assert latency["server_units"] == 1 and [r["clients"] for r in latency["rows"]] == [1]
    row = latency["rows"][0]
    assert row["n"] == 1 and row["p50_s"] > 0
    turn = row["runs"][0][0]
    assert "ask not what your country can do for you" in normalize(turn["transcript"])
    assert turn["speech_end_source"] == "server_vad" and 10.0 < turn["speech_end_s"] < 11.0


# -- the load run against a fake server ------------------------------------------------

REPLY_S = 0.3  # the fake answers after this much new audio
HOLD_S = 1.0  # and finishes the reply this long after, unless new speech cuts it


def _load_server(capacity: int, state: dict):
    """A fake Realtime server with ``capacity`` units: the next client is refused with a
    503 and ``Retry-After: 1`` before the upgrade, the one after that with the
    post-upgrade ``session_limit_reached`` error and close 1013, and so on. An admitted
    session answers every REPLY_S of new audio; a reply still open when the next answer
    is due is cancelled (turn_detected), as a barge-in would be."""
    from aiohttp import WSCloseCode, web

    state.update(busy=0, refusals=0, peak=0)

    async def realtime(request):
        if state["busy"] >= capacity:
            state["refusals"] += 1
            if state["refusals"] % 2:
                return web.json_response({"error": {"type": "invalid_request_error",
                                                    "code": "session_limit_reached", "message": "full",
                                                    "param": None}},
                                         status=503, headers={"Retry-After": "1"})
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.send_json({"type": "error", "error": {
                "type": "invalid_request_error", "code": "session_limit_reached", "message": "full"}})
            await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"session limit reached")
            return ws
        state["busy"] += 1
        state["peak"] = max(state["peak"], state["busy"])
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        open_replies: dict[str, asyncio.Task] = {}
        total = since = 0

        async def finish(rid: str) -> None:
            await asyncio.sleep(HOLD_S)
            open_replies.pop(rid, None)
            await ws.send_json(_delta(rid))
            await ws.send_json(_done(rid))

        try:
            await ws.send_json({"type": "session.created", "session": {}})
            async for msg in ws:
                event = json.loads(msg.data)
                if event["type"] == "session.update":
                    await ws.send_json({"type": "session.updated", "session": {}})
                elif event["type"] == "input_audio_buffer.append":
                    samples = len(base64.b64decode(event["audio"])) // 2
                    total, since = total + samples, since + samples
                    if since < REPLY_S * CLIENT_RATE:
                        continue
                    since = 0
                    for rid, task in list(open_replies.items()):  # spoken over: cancelled
                        task.cancel()
                        del open_replies[rid]
                        await ws.send_json(_done(rid, "cancelled"))
                    rid = f"r{len(state.setdefault('replies', []))}"
                    state["replies"].append(rid)
                    for payload in ({"type": "input_audio_buffer.speech_stopped",
                                     "audio_end_ms": round(total / CLIENT_RATE * 1000) - 50},
                                    {"type": "response.created", "response": {"id": rid}}, _delta(rid)):
                        await ws.send_json(payload)
                    open_replies[rid] = asyncio.create_task(finish(rid))
        finally:
            for task in open_replies.values():
                task.cancel()
            state["busy"] -= 1
        return ws

    async def pool(request):
        units = [{"state": "busy"}] * state["busy"] + [{"state": "free"}] * (capacity - state["busy"])
        return web.json_response({"num_pipelines": capacity, "rss_bytes": 100 * 1024 * 1024,
                                  "units": units, "models": []})

    app = web.Application()
    app.router.add_get("/v1/realtime", realtime)
    app.router.add_get("/v1/pool", pool)
    return app


async def _with_load_server(capacity: int, state: dict, body):
    from aiohttp import web

    runner = web.AppRunner(_load_server(capacity, state))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        return await body(f"ws://127.0.0.1:{port}/v1/realtime", f"http://127.0.0.1:{port}/v1/pool")
    finally:
        await runner.cleanup()


def _load_plan(clients: int = 1, duration_s: float = 1.0) -> LoadPlan:
    speech = Utterance.from_audio("speech", _tone(0.25), tail_s=0.1)  # answered at 0.3 s
    barge = Utterance.from_audio("barge", _tone(0.3), tail_s=0.1)
    return LoadPlan(clients, 1, duration_s, speech, barge, seed=0, retry_s=0.3, turn_timeout=10,
                    connect_timeout=5)


@pytest.mark.parametrize("scenario, seed, counted", [
    ("turn", 0, {"answered": 1}),
    ("barge_in", 0, {"answered": 1, "cut": 1}),
    ("drop", 1, {"dropped": 1, "speaking": 1}),  # Random(1).random() < 0.5: while speaking
    ("drop", 0, {"dropped": 1, "replying": 1}),
])
def test_each_session_kind_is_played_and_counted(scenario, seed, counted):
    plan = _load_plan()
    stats = LoadStats()
    state: dict = {}

    async def body(url, _pool_url):
        async with RealtimeClient(url, connect_timeout=5) as client:
            await play_session(client, scenario, plan, random.Random(seed), stats)
            return client.tracker

    tracker = asyncio.run(_with_load_server(1, state, body))
    got = {**stats.outcomes, **stats.barge_ins, **stats.dropped_while}
    assert {k: v for k, v in got.items() if v} == counted
    if scenario == "barge_in":  # the first reply was cut, the second answered the barge-in
        assert [r.status for r in tracker.responses.values()] == ["cancelled", "completed"]
        assert stats.answers[0][1].voice_to_voice_s > 0
    if counted.get("speaking"):
        assert state.get("replies", []) == []  # gone before the fake's 0.3 s of speech


def test_a_refusal_either_way_is_a_session_refused():
    assert retry_after("7") == 7.0 and retry_after(" 2 ") == 2.0
    assert retry_after(None) is None and retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    state: dict = {}

    async def body(url, _pool_url):
        async with RealtimeClient(url, connect_timeout=5):
            refusals = []
            for client in (1, 2):
                try:
                    await RealtimeClient(url, client, connect_timeout=5).connect()
                except SessionRefused as refused:
                    refusals.append((refused.how, refused.retry_after_s, str(refused)))
            return refusals

    first, second = asyncio.run(_with_load_server(1, state, body))
    assert first == ("http_503", 1.0, "client 1: the server answered 503 (full)")
    assert second[:2] == ("session_limit_reached", None)
    assert "client 2: server error: invalid_request_error (session_limit_reached): full" in second[2]


def test_load_run_counts_add_up_and_retry_after_is_honoured():
    plan = _load_plan(clients=3, duration_s=4.0)
    stats = LoadStats()
    state: dict = {}

    async def body(url, pool_url):
        return await run_load(url, pool_url, plan, stats=stats)

    t0 = time.monotonic()
    doc = asyncio.run(_with_load_server(1, state, body))
    assert time.monotonic() - t0 < 30
    assert state["peak"] == 1  # never more sessions than units
    assert doc["connections"] == doc["admitted"] + doc["refused"] + doc["connect_errors"]
    assert doc["connect_errors"] == 0 and doc["failed"] == 0, doc["failures"]
    assert doc["admitted"] == doc["answered"] + doc["dropped"] + doc["failed"] >= 2
    assert sum(doc["sessions"].values()) == doc["admitted"]
    assert sum(doc["dropped_while"].values()) == doc["dropped"]
    assert sum(doc["barge_ins"].values()) == doc["sessions"]["barge_in"]
    assert set(doc["refused_by"]) == {"http_503", "session_limit_reached"}
    assert sum(doc["refused_by"].values()) == doc["refused"]
    assert doc["voice_to_voice"]["n"] == doc["answered"] == len(doc["answers"])
    assert doc["rss"]["start_bytes"] == doc["rss"]["end_bytes"] == 100 * 1024 * 1024
    assert doc["units"] == {"total": 1, "free_at_end": 1}
    # after a 503 with Retry-After: 1 a client waits at least that long before its next try
    waits = 0
    for client in range(3):
        mine = [a for a in stats.attempts if a.client == client]
        for before, after in itertools.pairwise(mine):
            if before.retry_after_s is not None:
                assert after.t - before.t >= before.retry_after_s, (before, after)
                waits += 1
    assert waits >= 1 and doc["retry_after_waited_s"] >= waits
    assert max(a.t for a in stats.attempts) < plan.duration_s  # no new session after the time
    text = format_load_report(doc)
    assert "load: 3 clients against 1 pipeline(s) for 4 s (seed 0)" in text
    assert "connections  admitted  refused    503   1013  errors" in text
    assert f"voice-to-voice over {doc['answered']} answered: p50 " in text
    assert "server RSS (GET /v1/pool rss_bytes): start 100.0 MiB" in text
    assert "units free at the end: 1 of 1" in text


@pytest.mark.slow
def test_bench_serve_load_on_the_offline_stack():
    result = run_cli("bench", "serve", "--load", "--clients", "3", "--pipelines", "1", "--duration", "15",
                     "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    for key in ("connections", "admitted", "refused", "refused_by", "answered", "dropped", "failed",
                "sessions", "barge_ins", "voice_to_voice", "rss", "units", "answers", "wall_s"):
        assert key in doc, key
    assert doc["connections"] == doc["admitted"] + doc["refused"] + doc["connect_errors"]
    assert doc["admitted"] == doc["answered"] + doc["dropped"] + doc["failed"] >= 1
    assert doc["failed"] == 0 and doc["connect_errors"] == 0, doc["failures"]
    assert doc["refused"] >= 2  # three clients at once against one unit
    assert doc["voice_to_voice"]["n"] == doc["answered"]
    assert all(a["voice_to_voice_s"] > 0 and a["reply"] for a in doc["answers"])
    rss = doc["rss"]
    for key in ("start_bytes", "after_warmup_bytes", "end_bytes", "peak_bytes"):
        assert rss[key] > 100 * 1024 * 1024, key
    assert doc["units"] == {"total": 1, "free_at_end": 1}  # nothing leaked
    assert "one two three" in normalize(doc["warmup"]["transcript"]) and doc["warmup"]["reply"]
