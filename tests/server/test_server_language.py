"""The realtime server with ``stt.language = auto`` on the multilingual Whisper base: a
client of the official ``openai`` package sends French speech without setting a
transcription language, and its transcript event carries the language detected."""

from __future__ import annotations

import asyncio
import base64
import shutil

import numpy as np
import pytest

from tests.support.server import to_pcm16_24k

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                 reason="espeak-ng speaks the French turn: apt install espeak-ng")]


@pytest.fixture(scope="module")
def multilingual_server(whisper_base_multilingual):
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.runtime.hub import HubStatus
    from engine.server.runner import ServerThread
    from engine.server.server_settings import ServerSettings

    config = EngineConfig().with_overrides({"stt.model": whisper_base_multilingual,
                                            "stt.backend": "faster-whisper",
                                            "stt.language": "auto"})
    engine = Engine(config, hub=HubStatus(offline=True))
    engine.load()
    server = ServerThread(engine, ServerSettings(port=0, num_pipelines=1))
    server.start()
    yield server
    server.stop(20.0)
    engine.close()


def test_french_speech_without_a_language_gets_a_transcript_event_in_french(multilingual_server):
    from openai import AsyncOpenAI

    from engine.bench.language import espeak_speech

    port = multilingual_server.port
    speech = espeak_speech("fr", "Je voudrais un café, s'il vous plaît.")
    silence = np.zeros(8000, np.float32)
    pcm = to_pcm16_24k(np.concatenate([silence, speech, silence, silence, silence, silence]), 16000)

    async def run():
        client = AsyncOpenAI(api_key="unused-on-loopback", base_url=f"http://127.0.0.1:{port}/v1",
                             websocket_base_url=f"ws://127.0.0.1:{port}/v1")
        async with client.realtime.connect(model="parley",
                                           websocket_connection_options={"proxy": None}) as conn:
            created = await conn.recv()
            for at in range(0, len(pcm), 9600):  # 0.2 s at a time
                await conn.input_audio_buffer.append(
                    audio=base64.b64encode(pcm[at:at + 9600]).decode("ascii"))
            async for event in conn:
                if event.type in ("conversation.item.input_audio_transcription.completed", "error"):
                    return created, event
        raise AssertionError("the connection closed before a transcript")

    created, event = asyncio.run(asyncio.wait_for(run(), 240))
    # Detected per turn: the session names no transcription language.
    assert created.session.audio.input.transcription.language is None
    assert event.type == "conversation.item.input_audio_transcription.completed", event
    assert "café" in event.transcript.lower()
    extra = event.model_extra or {}
    assert extra["language"] == "fr" and 0.5 < extra["language_probability"] <= 1.0
