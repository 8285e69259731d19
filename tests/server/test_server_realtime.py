"""``parley-cli serve`` as a real subprocess, driven by the official ``openai`` package's
realtime client: a spoken turn streamed at real time, the pool's limits, and a fresh unit
(no history) for every client. One server (two pipelines) serves the whole module.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import time

import numpy as np
import pytest

from engine.audio.decode import load_audio
from tests.support.server import (ServeProcess, free_port, get_pool, pcm16_to_float, pool_when,
                                  to_pcm16_24k)
from tests.support.transcripts import normalize
from tests.support.tts import transcribe

pytestmark = pytest.mark.slow
CHUNK_S = 0.04


@pytest.fixture(scope="module")
def served():
    port = free_port()
    server = ServeProcess("--port", str(port), "--num-pipelines", "2",
                          env={"PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"]})
    server.wait_ready(300)  # the first run ever converts SmolLM2 (~30 s)
    yield server, port
    server.stop()


def realtime(port: int):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="unused-on-loopback", base_url=f"http://127.0.0.1:{port}/v1",
                         websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    return client.realtime.connect(model="parley", websocket_connection_options={"proxy": None})


def all_free(pool: dict) -> bool:
    return all(u["state"] == "free" for u in pool["units"])


def test_jfk_streamed_at_real_time_is_transcribed_and_answered_aloud(served, jfk_path, whisper_tiny_en):
    _server, port = served
    speech = to_pcm16_24k(load_audio(jfk_path), 16000)
    stream = speech + bytes(round(1.5 * 24000) * 2)  # then 1.5 s of silence
    chunk = round(CHUNK_S * 24000) * 2

    async def run():
        await pool_when(port, all_free)
        async with realtime(port) as conn:
            created = await conn.recv()
            t0 = time.monotonic()

            async def send() -> None:  # at real time, as a microphone would
                for k, at in enumerate(range(0, len(stream), chunk)):
                    await asyncio.sleep(max(0.0, t0 + k * CHUNK_S - time.monotonic()))
                    await conn.input_audio_buffer.append(
                        audio=base64.b64encode(stream[at:at + chunk]).decode("ascii"))

            sender = asyncio.create_task(send())
            events = []
            try:
                async for event in conn:
                    events.append((time.monotonic(), event))
                    if event.type in ("response.done", "error"):
                        break
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            return created, t0, events

    created, t0, timed = asyncio.run(asyncio.wait_for(run(), 180))
    events = [e for _t, e in timed]
    kinds = [e.type for e in events]
    assert created.type == "session.created"
    # The default end of turn, auto, is the learned one where Smart Turn is installed (the
    # test extra installs it): the Realtime API's name for it is semantic_vad.
    assert created.session.audio.input.turn_detection.type == "semantic_vad"
    assert "error" not in kinds, [e for e in events if e.type == "error"]
    for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                 "input_audio_buffer.committed", "response.created"):
        assert kind in kinds
    completed = next(e for e in events if e.type == "conversation.item.input_audio_transcription.completed")
    assert "ask not what your country" in normalize(completed.transcript)
    partials = [e.delta for e in events if e.type == "conversation.item.input_audio_transcription.delta"]
    assert partials, "no live transcription deltas while the user spoke"
    reply = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
    assert reply.strip()
    pcm = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
    audio = pcm16_to_float(pcm)
    assert len(pcm) % 2 == 0 and audio.size > 0.5 * 24000
    heard = transcribe(whisper_tiny_en, audio, 24000).split()
    assert len(heard) >= 2, heard
    assert {w for w in heard if len(w) > 2} & set(normalize(reply).split()), (heard, reply)
    done = events[-1]
    assert done.type == "response.done" and done.response.status == "completed"
    assert done.response.output[0].content[0].transcript == reply
    ids = [e.event_id for e in events]
    assert len(set(ids)) == len(ids)
    # Voice-to-voice, from the server's turn record and from the client's clock: first
    # reply audio minus the end of speech (audio_end_ms on the stream's real-time clock).
    stopped = next(e for e in events if e.type == "input_audio_buffer.speech_stopped")
    first_audio = next(t for t, e in timed if e.type == "response.output_audio.delta")
    client_v2v = first_audio - (t0 + stopped.audio_end_ms / 1000)
    server_v2v = done.response.model_extra["parley"]["voice_to_voice_s"]
    print(f"\njfk through the server: voice-to-voice {server_v2v:.3f} s (turn record), "
          f"{client_v2v:.3f} s at the client; reply: {reply!r}; heard back: {' '.join(heard)!r}")
    assert 0 < server_v2v < 20 and 0 < client_v2v < 20


def test_two_pipelines_a_third_client_is_refused_and_each_client_starts_afresh(served):
    from websockets.exceptions import InvalidStatus

    _server, port = served

    async def ask(conn, text: str):
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        await conn.response.create()
        async for event in conn:
            assert event.type != "error", event
            if event.type == "response.done":
                return event.response

    async def run():
        await pool_when(port, all_free)
        async with contextlib.AsyncExitStack() as stack:
            a = await stack.enter_async_context(realtime(port))
            unit_a = (await a.recv()).session.model_extra["parley"]["unit"]
            b = await stack.enter_async_context(realtime(port))
            await b.recv()
            with pytest.raises(InvalidStatus) as refused:  # before the upgrade: HTTP 503
                async with realtime(port):
                    pass
            busy = await asyncio.to_thread(get_pool, port)
            told = await ask(a, "My name is Ada.")
            after_a = await asyncio.to_thread(get_pool, port)
            await a.close()
            await pool_when(port, lambda p: p["units"][unit_a]["state"] == "free")
            d = await stack.enter_async_context(realtime(port))
            unit_d = (await d.recv()).session.model_extra["parley"]["unit"]
            fresh = await asyncio.to_thread(get_pool, port)
            answer = await ask(d, "What is my name?")
            return (refused.value.response, busy, told, after_a, unit_a, unit_d, fresh, answer)

    refused, busy, told, after_a, unit_a, unit_d, fresh, answer = asyncio.run(
        asyncio.wait_for(run(), 240))
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
    assert json.loads(refused.body)["error"]["code"] == "session_limit_reached"
    assert busy["num_pipelines"] == 2 and [u["state"] for u in busy["units"]] == ["busy", "busy"]
    clients = [u["client"] for u in busy["units"]]
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", c) for c in clients) and len(set(clients)) == 2
    assert {m["stage"] for m in busy["models"]} == {"vad", "stt", "llm", "tts"}
    assert all(m["device"] and m["actual_device"] for m in busy["models"])
    assert told.status == "completed"
    assert after_a["units"][unit_a]["history_turns"] == 1 and after_a["units"][unit_a]["turns"] == 1
    # The next client gets the slot A left, with a new unit: no history, no turns.
    assert unit_d == unit_a
    assert fresh["units"][unit_d]["state"] == "busy"
    assert fresh["units"][unit_d]["history_turns"] == 0 and fresh["units"][unit_d]["turns"] == 0
    assert answer.status == "completed"
    assert answer.model_extra["parley"]["llm_history_turns"] == 0  # nothing before it in the prompt
    assert "ada" not in normalize(answer.output[0].content[0].transcript).split()


def test_sigterm_stops_the_server_cleanly(served):
    server, port = served
    assert np.isfinite(get_pool(port)["rss_bytes"])
    assert server.stop() == 0, server.stderr
    assert "stopping: closing connections" in server.stderr
    assert "Traceback" not in server.stderr
