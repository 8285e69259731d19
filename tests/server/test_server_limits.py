"""A session's idle and length limits free its unit and tell the client why; the HTTP
routes' model calls queue at the compute gate with the realtime units'. One server with
one pipeline, in-process, on the offline models."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
import urllib.request

import numpy as np
import pytest
import soundfile
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from engine.runtime.compute_gate import ComputeGate, set_compute_gate
from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from tests.support.server import append_event, recv_json, wait_free
from tests.support.threads import HeldGate

pytestmark = pytest.mark.slow
IDLE_S = 1.5
HOLD_S = 5.0  # how long a unit's call holds the gate while an HTTP call waits for it
MAX_S = 4.0


@pytest.fixture(scope="module")
def limited(server_engine):
    settings = ServerSettings(port=0, num_pipelines=1, idle_timeout_s=IDLE_S, max_session_s=MAX_S)
    server = ServerThread(server_engine, settings)
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"



async def _until_closed(conn, keep_busy: str | None) -> tuple[list[dict], object, float]:
    """Events until the server closes the connection, sending ``keep_busy`` (a client
    event) every 0.3 s besides 100 ms of silence every 0.1 s; the events, the close frame
    and when it came."""
    silence = np.zeros(2400, "<i2").tobytes()
    events: list[dict] = []
    started = time.monotonic()
    ticks = 0
    try:
        while True:
            try:
                events.append(await recv_json(conn, 0.1))
            except TimeoutError:
                pass
            ticks += 1
            await conn.send(append_event(silence))
            if keep_busy is not None and ticks % 3 == 0:
                await conn.send(keep_busy)
            assert time.monotonic() - started < MAX_S + 10, events
    except ConnectionClosed as closed:
        return events, closed.rcvd, time.monotonic() - started


def test_an_idle_session_is_closed_and_its_unit_freed(limited):
    wait_free(limited)

    async def run():
        async with connect(limited.url, proxy=None, max_size=None) as conn:
            assert (await recv_json(conn))["type"] == "session.created"
            return await _until_closed(conn, keep_busy=None)

    events, close, took = asyncio.run(run())
    errors = [e["error"] for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["session_idle_timeout"], events
    assert errors[0]["type"] == "invalid_request_error" and "idle" in errors[0]["message"]
    assert close is not None and close.code == 1001 and close.reason == "session_idle_timeout"
    assert IDLE_S - 0.2 <= took < MAX_S  # streamed silence was not activity
    wait_free(limited)


def test_a_session_active_all_along_ends_at_its_maximum_length(limited):
    wait_free(limited)

    async def run():
        async with connect(limited.url, proxy=None, max_size=None) as conn:
            assert (await recv_json(conn))["type"] == "session.created"
            return await _until_closed(conn, json.dumps({"type": "input_audio_buffer.clear"}))

    events, close, took = asyncio.run(run())
    errors = [e["error"] for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["session_expired"], events
    assert errors[0]["message"].startswith("Your session hit the maximum duration of 4 seconds")
    assert close is not None and close.code == 1001 and close.reason == "session_expired"
    assert MAX_S - 0.2 <= took < MAX_S + 3
    wait_free(limited)


@pytest.fixture(scope="module")
def prompting(server_engine):
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1), first_unit=1)
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"


def test_the_clients_idle_timeout_prompts_the_user_as_openai_does(prompting):
    silence = np.zeros(2400, "<i2").tobytes()

    async def run():
        async with connect(prompting.url, proxy=None, max_size=None) as conn:
            assert (await recv_json(conn))["type"] == "session.created"
            await conn.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {
                "turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}}}}}))
            seen: list[tuple[float, dict]] = []
            started = time.monotonic()
            while not any(e["type"] == "response.done" for _t, e in seen):
                assert time.monotonic() - started < 60, [e["type"] for _t, e in seen]
                try:
                    seen.append((time.monotonic() - started, await recv_json(conn, 0.1)))
                except TimeoutError:
                    await conn.send(append_event(silence))  # an open microphone, silent
            return seen

    seen = asyncio.run(run())
    types = [e["type"] for _t, e in seen]
    assert types[0] == "session.updated"
    assert seen[0][1]["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 1000
    at = types.index("input_audio_buffer.timeout_triggered")
    when, event = seen[at]
    assert when >= 0.9 and event["audio_end_ms"] - event["audio_start_ms"] == 1000
    assert "response.created" in types[at:] and "error" not in types, types


def _post(url: str, body: dict) -> tuple[int, bytes]:
    """POST ``body`` as JSON, or as multipart with a second of silence as ``file`` when
    it names no ``input``/``messages`` (a transcription)."""
    if "messages" in body or "input" in body:
        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
    else:
        wav = io.BytesIO()
        soundfile.write(wav, np.zeros(16000, np.float32), 16000, format="WAV")
        boundary = "parley-test-boundary"
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
                 f'{body["model"]}\r\n'.encode(),
                 f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                 f'filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode(),
                 wav.getvalue(), f"\r\n--{boundary}--\r\n".encode()]
        request = urllib.request.Request(url, data=b"".join(parts), headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.read()


def _model_id(server: ServerThread, stage: str) -> str:
    with urllib.request.urlopen(f"{server.http_url}/models", timeout=10) as response:
        models = json.loads(response.read())["data"]
    return next(m["id"] for m in models if m["parley"]["stage"] == stage)


@pytest.mark.parametrize(("route", "stage", "body"), [
    ("/chat/completions", "llm", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
    ("/audio/speech", "tts", {"input": "Hello.", "response_format": "pcm"}),
    ("/audio/transcriptions", "stt", {}),
])
def test_an_http_model_call_waits_for_the_compute_gate(limited, route, stage, body):
    model = limited.server.engine.models[stage]
    if model.actual_device != "cpu":
        pytest.skip(f"the {stage} model is not on the CPU: it takes no gate")
    body = {**body, "model": _model_id(limited, stage)}
    gate = ComputeGate(1)
    old = set_compute_gate(gate)
    answers: list[tuple[int, bytes]] = []
    try:
        held = HeldGate(gate)  # a realtime unit's call holds the only place
        caller = threading.Thread(target=lambda: answers.append(_post(limited.http_url + route, body)))
        caller.start()
        caller.join(HOLD_S)  # without the gate each call is done well within this
        waited = caller.is_alive() and not answers
        held.end()
        caller.join(60)
    finally:
        set_compute_gate(old)
    assert waited, "the HTTP call ran while a unit held the gate"
    assert answers and answers[0][0] == 200 and answers[0][1]
