"""Remote STT and TTS (and LLM) on a real server: Parley's own ``parley-cli serve`` in a
subprocess, with an API key, answering the OpenAI HTTP API on the models it holds.

The server's HTTP API as the official ``openai`` client sees it; full turns from
jfk.flac with every model stage on the server; and STT/TTS failures (a speech stream cut
midway, a timeout, a 503 retried, a wrong key) ending the turn with a message while the
next turn works.
"""

from __future__ import annotations

import io
import json
import os
import urllib.request

import numpy as np
import pytest
import soundfile as sf

from engine.audio.decode import load_audio
from engine.config import EngineConfig
from engine.errors import DeviceError
from engine.measures import Figure
from engine.models.model_registry import ModelRegistry
from engine.recording import load_engine, run_recording
from tests.support.remote import FaultProxy, wait_http
from tests.support.server import ServeProcess, free_port
from tests.support.threads import new_threads, thread_names
from tests.support.transcripts import normalize

pytestmark = pytest.mark.slow

KEY = "sk-parley-serve-51c9e07d2a4b86f3"
KEY_ENV = "PARLEY_TEST_SERVE_KEY"
FAST = {"turns.barge_in": "off", "llm.max_new_tokens": 16, "llm.max_sentences": 1}


@pytest.fixture(scope="module")
def serve(smollm2_conversion):
    """``parley-cli serve`` on the bundled offline stack, with an API key (from the
    environment, as a user would pass it), on a free loopback port."""
    port = free_port()
    server = ServeProcess("--port", str(port), "--num-pipelines", "1",
                          env={"PARLEY_API_KEY": KEY,
                               "PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"]})
    server.wait_ready(240)
    server.url = f"http://127.0.0.1:{port}/v1"
    yield server
    assert server.stop() == 0, server.stderr


@pytest.fixture(scope="module")
def models(serve) -> dict[str, str]:
    """The model ids the server lists, by stage."""
    body = wait_http(f"{serve.url}/models", 10, headers={"Authorization": f"Bearer {KEY}"})
    return {m["parley"]["stage"]: m["id"] for m in body["data"]}


@pytest.fixture(scope="module")
def proxy(serve):
    fault = FaultProxy(serve.url.removesuffix("/v1"))
    yield fault
    fault.close()


@pytest.fixture
def clean(proxy, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    proxy.reset()
    before = thread_names()
    yield
    proxy.reset()
    assert new_threads(before) == set()


@pytest.fixture(scope="module")
def registry():
    return ModelRegistry()


def client():
    import openai

    return openai.OpenAI


def remote(url: str, stages=("stt", "llm", "tts"), **more) -> EngineConfig:
    overrides = dict(FAST)
    for stage in stages:
        overrides.update({f"{stage}.backend": "openai", f"{stage}.base_url": url,
                          f"{stage}.api_key_env": KEY_ENV})
    overrides.update(more)
    return EngineConfig().with_overrides(overrides)


# ---------------------------------------------------------------------- the HTTP API
def test_the_openai_http_api_on_the_models_it_holds(serve, models, one_two_three_path, clean):
    import openai

    api = openai.OpenAI(api_key=KEY, base_url=serve.url, max_retries=0)
    try:
        listed = api.models.list()
        assert {m.owned_by for m in listed.data} == {"parley"}
        assert set(models) == {"stt", "llm", "tts"}
        assert models["llm"] == "SmolLM2-135M-Instruct.Q4_1"
        assert models["tts"] == "en_US-joe-medium"
        # Chat: whole, and streamed with usage.
        question = [{"role": "user", "content": "What is the capital of France?"}]
        whole = api.chat.completions.create(model=models["llm"], messages=question, max_tokens=12)
        assert whole.choices[0].message.content.strip() and whole.usage.completion_tokens >= 1
        assert whole.choices[0].finish_reason in ("stop", "length")
        stream = api.chat.completions.create(model=models["llm"], messages=question, max_tokens=12,
                                             stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == whole.choices[0].message.content  # greedy: the same reply
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
        # Speech: pcm at 24 kHz, and a streamed WAV at the voice's rate.
        pcm = api.audio.speech.create(model=models["tts"], input="One, two, three.", voice="alloy",
                                      response_format="pcm").read()
        assert len(pcm) % 2 == 0 and 0.5 < len(pcm) / 2 / 24000 < 5
        wav = api.audio.speech.create(model=models["tts"], input="One, two, three.",
                                      voice="alloy", response_format="wav", speed=1.5).read()
        assert wav[:4] == b"RIFF" and wav[24:28] == (22050).to_bytes(4, "little")
        # Transcription: json, text, and streamed events; from that speech.
        audio = (np.frombuffer(pcm, "<i2") / 32768.0).astype(np.float32)
        buffer = io.BytesIO()
        sf.write(buffer, audio, 24000, format="WAV", subtype="PCM_16")
        data = buffer.getvalue()
        said = api.audio.transcriptions.create(file=("a.wav", data), model=models["stt"],
                                               language="en")
        assert any(word in said.text.lower() for word in ("one", "1")), said.text
        text = api.audio.transcriptions.create(file=("a.wav", data), model=models["stt"],
                                               response_format="text")
        assert isinstance(text, str) and text.strip() == said.text
        events = list(api.audio.transcriptions.create(file=("a.wav", data), model=models["stt"],
                                                      stream=True))
        assert [e.type for e in events] == ["transcript.text.delta", "transcript.text.done"]
        assert events[-1].text == said.text
        # A recording as it comes: FLAC, 44.1 kHz.
        flac = api.audio.transcriptions.create(file=one_two_three_path, model=models["stt"])
        assert flac.text.strip()
        # What is refused, and how.
        with pytest.raises(openai.NotFoundError, match="is not served here"):
            api.chat.completions.create(model="gpt-4o", messages=question)
        with pytest.raises(openai.BadRequestError, match="use pcm or wav"):
            api.audio.speech.create(model=models["tts"], input="Hi", voice="alloy",
                                    response_format="mp3")
        with pytest.raises(openai.BadRequestError, match="not audio Parley can read"):
            api.audio.transcriptions.create(file=("a.wav", b"not audio"), model=models["stt"])
        with pytest.raises(openai.BadRequestError, match="'messages'"):
            api.chat.completions.create(model=models["llm"], messages=[])
        with pytest.raises(openai.BadRequestError, match="only text parts"):
            api.chat.completions.create(model=models["llm"], messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    finally:
        api.close()
    # The realtime endpoint's rules hold: no key, no answer.
    nokey = openai.OpenAI(api_key="sk-wrong", base_url=serve.url, max_retries=0)
    try:
        with pytest.raises(openai.AuthenticationError):
            nokey.models.list()
        with pytest.raises(openai.AuthenticationError):
            nokey.chat.completions.create(model=models["llm"], messages=question)
    finally:
        nokey.close()
    assert KEY not in serve.stderr


def test_two_chat_requests_at_once_each_get_their_session(serve, models, clean):
    """Model work runs off the loop on the server: two streamed replies interleave, each
    complete and each the greedy reply to its own question."""
    import concurrent.futures

    import openai

    api = openai.OpenAI(api_key=KEY, base_url=serve.url, max_retries=0)
    questions = ["What is the capital of France?", "Name a colour of the sky."]

    def ask(question):
        stream = api.chat.completions.create(model=models["llm"], max_tokens=10, stream=True,
                                             messages=[{"role": "user", "content": question}])
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    try:
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="two-clients") as pool:
            together = list(pool.map(ask, questions))
        alone = [ask(q) for q in questions]
        assert together == alone and all(together)
    finally:
        api.close()
    status = json.loads(urllib.request.urlopen(urllib.request.Request(  # the pool still answers
        f"{serve.url}/pool", headers={"Authorization": f"Bearer {KEY}"}), timeout=10).read())
    assert status["num_pipelines"] == 1


# ---------------------------------------------------------------------- full turns
def test_jfk_with_every_model_stage_on_parley_serve(serve, models, registry, jfk_path, tmp_path,
                                                    clean):
    engine = load_engine(remote(serve.url), registry)
    try:
        got = {s: (p.backend, str(p.device), p.model) for s, p in engine.placements.items()}
        assert got == {"vad": ("silero", "cpu", got["vad"][2]),
                       "stt": ("openai", "remote", models["stt"]),  # auto: the server's STT
                       "llm": ("openai", "remote", models["llm"]),
                       "tts": ("openai", "remote", models["tts"])}
        output = tmp_path / "reply.wav"
        turns, errors = run_recording(engine, load_audio(jfk_path), str(output), realtime=False)
        assert errors == []
        turn = next(t for t in turns if t.reply and not t.cancelled)
        assert "ask not what your country can do for you" in normalize(turn.transcript)
        assert len(turn.reply.split()) >= 2 and turn.reply.isascii()
        reply_audio = load_audio(output)
        assert len(reply_audio) > 8000 and float(np.abs(reply_audio).max()) > 0.05
        heard = engine.models["stt"].transcribe(reply_audio, "en").text
        assert set(normalize(heard).split()) & set(normalize(turn.reply).split()), (heard, turn.reply)
        for figure in (Figure.STT_NETWORK_S, Figure.STT_HEADERS_S, Figure.LLM_NETWORK_S,
                       Figure.LLM_HEADERS_S, Figure.LLM_FIRST_TOKEN_S, Figure.TTS_NETWORK_S,
                       Figure.TTS_HEADERS_S, Figure.TTS_FIRST_COMPUTE_S, Figure.STT_COMPUTE_S):
            assert turn.value(figure) is not None, figure
        # The upload of 11 s of audio is part of the STT request, and less than all of it.
        assert 0 < turn.value(Figure.STT_NETWORK_S) < turn.value(Figure.STT_COMPUTE_S)
    finally:
        engine.close()


def test_wav_speech_and_an_unstreamed_transcript(serve, registry, one_two_three_path, clean):
    engine = load_engine(remote(serve.url, ("stt", "tts"), **{"tts.response_format": "wav",
                                                               "stt.stream": False}), registry)
    try:
        turns, errors = run_recording(engine, load_audio(one_two_three_path), None, realtime=False)
        assert errors == []
        turn = next(t for t in turns if t.reply and not t.cancelled)
        assert turn.value(Figure.TTS_AUDIO_S) > 0.3
    finally:
        engine.close()


# ---------------------------------------------------------------------- failures
def test_a_speech_stream_cut_midway_then_the_next_turn(serve, registry, proxy, one_two_three_path,
                                                       clean):
    engine = load_engine(remote(proxy.url, ("stt", "tts")), registry)
    audio = load_audio(one_two_three_path)
    try:
        proxy.cut_after_bytes = 2000
        speech = proxy.count("/v1/audio/speech")
        turns, errors = run_recording(engine, audio, None, realtime=False)
        assert proxy.cuts == 1
        assert proxy.count("/v1/audio/speech") == speech + 1  # audio was heard: not asked again
        assert len(errors) == 1, errors
        assert errors[0].startswith(f"tts: the TTS server {proxy.url} stopped sending speech audio "
                                    "midway")
        proxy.reset()
        turns, errors = run_recording(engine, audio, None, realtime=False)
        assert errors == [] and any(t.reply and not t.cancelled for t in turns)
    finally:
        engine.close()


def test_an_stt_timeout_then_the_next_turn(serve, registry, proxy, one_two_three_path, clean):
    engine = load_engine(remote(proxy.url, ("stt",), **{"stt.timeout_s": 4.0, "stt.retries": 0}),
                         registry)
    audio = load_audio(one_two_three_path)
    try:
        proxy.delay_s = 6.0
        turns, errors = run_recording(engine, audio, None, realtime=False)
        assert len(errors) == 1, errors
        assert f"stt: the STT server {proxy.url} did not answer within 4 s (timeout)" in errors[0]
        assert "raise 'stt.timeout_s'" in errors[0]
        proxy.delay_s = 0.0
        turns, errors = run_recording(engine, audio, None, realtime=False)
        assert errors == [] and any(t.reply and not t.cancelled for t in turns)
    finally:
        engine.close()


def test_an_stt_503_is_retried(serve, registry, proxy, one_two_three_path, clean):
    engine = load_engine(remote(proxy.url, ("stt",)), registry)  # stt.retries = 1
    try:
        transcriptions = proxy.count("/v1/audio/transcriptions")
        proxy.fail = [503]
        turns, errors = run_recording(engine, load_audio(one_two_three_path), None, realtime=False)
        assert errors == [] and any(t.reply and not t.cancelled for t in turns)
        assert proxy.count("/v1/audio/transcriptions") >= transcriptions + 2
    finally:
        engine.close()


def test_a_wrong_key_is_named_before_anything_loads(serve, monkeypatch, clean):
    monkeypatch.setenv(KEY_ENV, "sk-not-the-key")
    with pytest.raises(DeviceError) as err:
        load_engine(remote(serve.url, ("tts",)))
    text = str(err.value)
    assert f"tts stage: remote server {serve.url} cannot be used" in text
    assert "401 Unauthorized" in text and KEY_ENV in text
    assert "sk-not-the-key" not in text and KEY not in text
