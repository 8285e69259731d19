"""The realtime server in-process (``ServerThread``) on the real offline models: raw
WebSocket clients, limits, the pool report, API keys and origins.

One engine serves the module; two servers share it on separate unit numbers: ``local``
(loopback, small limits) and ``guarded`` (127.0.0.2, API key, one allowed origin).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from engine.errors import ParleyError
from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from tests.support.server import (append_event, b64, pcm16_to_float, recv_json, recv_until, text_item)

pytestmark = pytest.mark.slow
KEY = "sk-parley-test-7f3a9c1e5b"
GOOD_ORIGIN = "http://good.example"
LIMITS = {"max_message_bytes": 256 * 1024, "max_buffer_s": 1.0, "max_events_per_s": 50.0}


@pytest.fixture(scope="module")
def local(server_engine):
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=2, **LIMITS))
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"


@pytest.fixture(scope="module")
def guarded(server_engine):
    settings = ServerSettings(host="127.0.0.2", port=0, num_pipelines=1, api_key=KEY,
                              allow_origins=(GOOD_ORIGIN,))
    server = ServerThread(server_engine, settings, first_unit=2)
    try:
        server.start()
    except ParleyError as exc:  # e.g. macOS, where only 127.0.0.1 is on the loopback
        pytest.skip(f"cannot listen on 127.0.0.2: {exc}")
    yield server
    assert server.stop(20.0), "the server thread did not stop"


def wait_all_free(server: ServerThread, timeout: float = 15.0) -> None:
    """Units are released after their client left (their threads are joined): wait for it."""
    deadline = time.monotonic() + timeout
    while any(u["state"] != "free" for u in server.pool_status()["units"]):
        assert time.monotonic() < deadline, server.pool_status()
        time.sleep(0.05)


def ws(url: str, **kwargs):
    return connect(url, proxy=None, max_size=None, **kwargs)


def http_get(url: str, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        exc.close()
        return exc.code, json.loads(body)


def pool_url(server: ServerThread) -> str:
    return server.url.replace("ws://", "http://").replace("/v1/realtime", "/v1/pool")


def silence(seconds: float) -> bytes:
    return np.zeros(round(seconds * 24000), "<i2").tobytes()


BAD_EVENTS = [
    ("{this is not json", "invalid_json", None),
    (json.dumps({"type": "conversation.teleport"}), "unknown_event_type", "type"),
    (json.dumps({"type": "session.update", "session": "everything"}), "invalid_value", "session"),
    (json.dumps({"type": "conversation.item.truncate", "item_id": "item_nope",
                 "audio_end_ms": 100}), "item_not_found", "item_id"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (300 * 1024)}),
     "message_too_large", None),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "%%% not base64 %%%"}),
     "invalid_audio", "audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": b64(b"\x00\x01\x02")}),
     "invalid_audio", "audio"),
]


def test_bad_events_get_errors_while_another_session_completes_a_turn(local):
    wait_all_free(local)
    replying = asyncio.Event

    async def talker(started: asyncio.Event):
        async with ws(local.url) as conn:
            assert (await recv_json(conn))["type"] == "session.created"
            await conn.send(json.dumps(text_item("Say hello to me.")))
            await conn.send(json.dumps({"type": "response.create"}))
            created, _ = await recv_until(conn, "response.created")
            started.set()
            done, seen = await recv_until(conn, "response.done", 180)
            return created, done, seen, time.monotonic()

    async def heckler(started: asyncio.Event):
        async with ws(local.url) as conn:
            assert (await recv_json(conn))["type"] == "session.created"
            await started.wait()
            answers = []
            for message, _code, _param in BAD_EVENTS:
                await conn.send(message)
                error = await recv_json(conn)
                await conn.send(json.dumps({"type": "session.update", "session": {}}))
                answers.append((error, await recv_json(conn)))
            return answers, time.monotonic()

    async def both():
        started = replying()
        return await asyncio.gather(talker(started), heckler(started))

    (created, done, seen, t_done), (answers, t_heckled) = asyncio.run(both())
    for (_message, code, param), (error, after) in zip(BAD_EVENTS, answers):
        assert error["type"] == "error", error
        assert (error["error"]["code"], error["error"]["param"]) == (code, param)
        assert after["type"] == "session.updated"  # the connection stayed usable
    assert t_heckled < t_done  # the errors were handled while the other reply streamed
    response = done["response"]
    assert response["status"] == "completed" and response["id"] == created["response"]["id"]
    transcript = "".join(e["delta"] for e in seen if e["type"] == "response.output_audio_transcript.delta")
    assert transcript.strip() and response["output"][0]["content"][0]["transcript"] == transcript
    audio = pcm16_to_float(b"".join(base64.b64decode(e["delta"]) for e in seen
                                    if e["type"] == "response.output_audio.delta"))
    assert audio.size > 0.3 * 24000
    assert float(np.sqrt(np.mean(audio ** 2))) > 0.01  # speech, not silence
    assert not [e for e in seen if e["type"] == "error"]


def test_pool_shows_busy_units_their_clients_and_the_models(local):
    wait_all_free(local)
    async def run():
        async with ws(local.url) as a, ws(local.url) as b:
            created = [await recv_json(a), await recv_json(b)]
            status, pool = await asyncio.to_thread(http_get, pool_url(local))
            with pytest.raises(InvalidStatus) as refused:  # before the upgrade: plain HTTP
                async with ws(local.url):
                    pass
            return created, status, pool, refused.value.response, {
                f"127.0.0.1:{a.local_address[1]}", f"127.0.0.1:{b.local_address[1]}"}

    created, status, pool, third, clients = asyncio.run(run())
    assert status == 200 and pool["num_pipelines"] == 2 and pool["rss_bytes"] > 0
    assert {u["state"] for u in pool["units"]} == {"busy"}
    assert {u["client"] for u in pool["units"]} == clients
    assert {u["unit"] for u in pool["units"]} == {c["session"]["parley"]["unit"] for c in created}
    models = {m["stage"]: m for m in pool["models"]}
    assert set(models) == {"vad", "stt", "llm", "tts"}
    assert all(m["device"] == "cpu" and m["actual_device"] == "cpu" for m in models.values())
    assert models["llm"]["lock"]["acquisitions"] >= 1 and models["vad"]["lock"] is None
    assert third.status_code == 503 and int(third.headers["Retry-After"]) >= 1
    assert json.loads(third.body)["error"]["code"] == "session_limit_reached"


def test_rate_limit_and_buffer_overflow(local):
    wait_all_free(local)
    async def run():
        async with ws(local.url) as conn:
            await recv_json(conn)
            empty = json.dumps({"type": "input_audio_buffer.append", "audio": ""})
            for _ in range(120):  # far beyond 50 events/s
                await conn.send(empty)
            limited, _ = await recv_until(conn, "error", 10)
            await asyncio.sleep(1.1)  # the bucket refills
            await conn.send(append_event(silence(1.5)))  # more than max_buffer_s at once
            overflow = await recv_json(conn)
            await conn.send(append_event(silence(0.2)))
            await conn.send(json.dumps({"type": "session.update", "session": {}}))
            after = await recv_json(conn)
            return limited, overflow, after

    limited, overflow, after = asyncio.run(run())
    assert limited["error"]["code"] == "rate_limit_exceeded"
    assert overflow["error"]["code"] == "input_audio_buffer_overflow"
    assert after["type"] == "session.updated"


# ---------------------------------------------------------------------- keys and origins
def test_api_key_is_checked_before_the_upgrade_and_never_logged(guarded, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger="websockets")  # the test's client logs its headers

    async def attempt(**kwargs):
        try:
            async with ws(guarded.url, **kwargs) as conn:
                return (await recv_json(conn))["type"]
        except InvalidStatus as exc:
            return exc.response.status_code

    bearer = {"Authorization": f"Bearer {KEY}"}
    assert asyncio.run(attempt()) == 401
    assert asyncio.run(attempt(additional_headers={"Authorization": "Bearer sk-wrong"})) == 401
    assert asyncio.run(attempt(additional_headers={"Authorization": KEY})) == 401  # no scheme
    assert asyncio.run(attempt(additional_headers=bearer)) == "session.created"
    wait_all_free(guarded)
    status, body = http_get(pool_url(guarded))
    assert status == 401 and body["error"]["code"] == "invalid_api_key" and KEY not in json.dumps(body)
    status, body = http_get(pool_url(guarded), bearer)
    assert status == 200 and body["num_pipelines"] == 1 and body["units"][0]["unit"] == 2
    out, err = capfd.readouterr()
    server_log = "\n".join(f"{r.name}: {r.getMessage()}" for r in caplog.records)
    assert "wrong API key" in server_log and "aiohttp.access" in server_log  # logs were caught...
    assert KEY not in server_log and KEY not in out and KEY not in err  # ...never the key


def test_foreign_origin_is_refused_and_an_allowed_one_connects(guarded):
    wait_all_free(guarded)
    async def attempt(origin: str):
        try:
            async with ws(guarded.url, origin=origin,
                          additional_headers={"Authorization": f"Bearer {KEY}"}) as conn:
                return (await recv_json(conn))["type"]
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(attempt("http://evil.example")) == 403
    assert asyncio.run(attempt(GOOD_ORIGIN)) == "session.created"


def test_a_message_over_the_transports_cap_closes_only_that_connection(local):
    wait_all_free(local)

    async def run():
        async with ws(local.url) as other, ws(local.url) as conn:
            await recv_json(other)
            await recv_json(conn)
            await conn.send(json.dumps({"type": "input_audio_buffer.append",
                                        "audio": "A" * (local.server.settings.hard_message_bytes + 10)}))
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await recv_json(conn)
            await other.send(json.dumps({"type": "session.update", "session": {}}))
            return closed.value, await recv_json(other)

    closed, other_answer = asyncio.run(run())
    assert closed.rcvd is not None and closed.rcvd.code == 1009  # message too big
    assert other_answer["type"] == "session.updated"


def test_stopping_the_server_closes_its_clients_and_stops_their_units(server_engine):
    before = set(threading.enumerate())
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1), first_unit=5)
    server.start()

    async def run():
        async with ws(server.url) as conn:
            await recv_json(conn)
            await conn.send(json.dumps(text_item("Tell me about the sea.")))
            await conn.send(json.dumps({"type": "response.create"}))
            await recv_until(conn, "response.created")
            stopped = await asyncio.to_thread(server.stop, 20.0)
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await recv_json(conn)
            return stopped, closed.value

    stopped, closed = asyncio.run(run())
    assert stopped
    assert closed.rcvd is not None and closed.rcvd.code == 1001  # going away
    assert not [u for u in server_engine.units if u.unit == 5]
    assert set(threading.enumerate()) - before == set()  # loop, executor and unit threads ended


def test_a_voice_the_tts_model_lacks_is_an_error_naming_the_field(local):
    wait_all_free(local)

    async def run():
        async with ws(local.url) as conn:
            await recv_json(conn)
            await conn.send(json.dumps({"type": "session.update", "event_id": "v1", "session": {
                "audio": {"output": {"voice": "nobody"}}}}))
            error = await recv_json(conn)
            assert (await recv_json(conn))["type"] == "session.updated"  # the rest applied
            await conn.send(json.dumps({"type": "session.update", "session": {
                "audio": {"output": {"voice": "auto"}}}}))
            return error, await recv_json(conn)

    error, updated = asyncio.run(run())
    assert error["type"] == "error"
    assert (error["error"]["code"], error["error"]["param"], error["error"]["event_id"]) == (
        "invalid_value", "session.audio.output.voice", "v1")
    assert "nobody" in error["error"]["message"]  # Piper's own words: which voices it has
    assert updated["type"] == "session.updated"
    assert updated["session"]["audio"]["output"]["voice"] == "auto"


def test_truncate_after_a_barge_in_leaves_only_the_heard_words_for_the_next_prompt(local):
    """A typed question answered aloud; at its first audio the client cuts the reply off
    (response.cancel, as a barge-in) and truncates it at 0.6 s: the history (what the LLM
    reads next) keeps only the words heard by then, even though the LLM was still writing."""
    wait_all_free(local)

    async def run():
        async with ws(local.url) as conn:
            await recv_json(conn)
            await conn.send(json.dumps(text_item("Tell me a long story about the sea.")))
            await conn.send(json.dumps({"type": "response.create"}))
            await recv_until(conn, "response.output_audio.delta", 180)
            await conn.send(json.dumps({"type": "response.cancel"}))
            done, _seen = await recv_until(conn, "response.done", 60)
            reply = done["response"]["output"][0]
            await conn.send(json.dumps({"type": "conversation.item.truncate",
                                        "item_id": reply["id"], "content_index": 0,
                                        "audio_end_ms": 600}))
            truncated = await recv_json(conn)
            await conn.send(json.dumps({"type": "conversation.item.retrieve",
                                        "item_id": reply["id"]}))
            retrieved = await recv_json(conn)
            lease = local.server.pool.leases()[0]
            prompt = lease.pipeline.chat_history.messages_for("Go on.", "S", 10)
            return done, reply, truncated, retrieved, prompt

    done, reply, truncated, retrieved, prompt = asyncio.run(run())
    assert done["response"]["status"] == "cancelled"
    spoken = reply["content"][0]["transcript"]  # what was sent before the cut
    assert truncated["type"] == "conversation.item.truncated", truncated
    heard = retrieved["item"]["content"][0]["transcript"]
    assert heard and spoken.startswith(heard), (heard, spoken)
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
    assert prompt[2]["content"] == heard  # the next prompt holds only what was heard
