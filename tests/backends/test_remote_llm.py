"""The LLM stage on a real OpenAI-compatible server: ``mlx_lm.server`` on loopback serving
the SmolLM2 copy Parley converts, with a fault-injecting proxy in front of it.

Full turns from jfk.flac (transcript, reply text, reply audio); placement and discovery
probing the server; and each failure a user can meet (stopped mid-reply, down, back,
a wrong key, a timeout, 429 and 5xx, a wrong model, barge-in) ending its turn with a
message that names the server while the next turn works. mlx on this CPU is slow
(a few tokens a second): replies are capped at a few tokens.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time

import pytest

from engine.audio.decode import load_audio
from engine.backends.base import GenerationOptions, LoadRequest
from engine.backends.remote import RemoteError
from engine.config import EngineConfig, LlmConfig
from engine.backends.remote_probe import discover_remote
from engine.runtime.devices import Device
from engine.errors import DeviceError, ModelError
from engine.measures import Figure
from engine.recording import load_engine, run_recording
from engine.report import placement_dict, turn_dict
from engine.models.model_registry import ModelRegistry
from tests.support.audio import speech_with_gap
from tests.support.cli import run_cli
from tests.support.remote import FaultProxy, MlxServer
from tests.support.server import free_port
from tests.support.threads import new_threads, thread_names
from tests.support.transcripts import normalize

pytestmark = pytest.mark.slow

KEY_ENV = "PARLEY_TEST_LLM_KEY"
SECRET = "sk-parley-remote-9d2f7c41b8e6a035"
BASE = {"turns.barge_in": "off", "llm.backend": "openai", "llm.max_new_tokens": 10,
        "llm.max_sentences": 1, "llm.timeout_s": 20.0, "llm.retries": 1}
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def mlx(smollm2_conversion, tmp_path_factory):
    server = MlxServer(smollm2_conversion.folder, tmp_path_factory.mktemp("mlx-server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(mlx):
    fault = FaultProxy(f"http://127.0.0.1:{mlx.port}")
    yield fault
    fault.close()


def remote_config(url: str, model: str, **more) -> EngineConfig:
    return EngineConfig().with_overrides({**BASE, "llm.base_url": url, "llm.model": model, **more})


@pytest.fixture(scope="module")
def registry(mlx):
    """Local VAD, STT and TTS loaded once for the module (pinned), shared by its engines."""
    shared = ModelRegistry()
    engine = load_engine(remote_config(mlx.url, mlx.model), shared)
    pinned = [(engine.placements[s], engine.config.stage_config(s)) for s in ("vad", "stt", "tts")]
    for placement, options in pinned:
        shared.acquire(placement, options)
    engine.close()
    yield shared
    for placement, options in pinned:
        shared.release(placement, options)


@pytest.fixture
def clean(proxy):
    """The proxy passes everything; no thread of the test outlives it."""
    proxy.reset()
    before = thread_names()
    yield
    proxy.reset()
    assert new_threads(before) == set()


def one_turn(engine, audio, output=None):
    turns, errors = run_recording(engine, audio, output, realtime=False)
    return turns, errors


def is_english(text: str) -> bool:
    words = re.findall(r"[A-Za-z']+", text)
    return len(words) >= 2 and sum(c.isascii() for c in text) >= 0.9 * len(text)


def answered(turns) -> str:
    """The reply of the run's one answered turn (asserting there is one)."""
    done = [t for t in turns if t.reply and not t.cancelled]
    assert done, [(t.transcript, t.reply, t.cancelled) for t in turns]
    return done[-1].reply


# ---------------------------------------------------------------------- full turns
def test_jfk_full_turn_with_the_llm_on_mlx_lm_server(mlx, registry, jfk_path, tmp_path, clean):
    engine = load_engine(remote_config(mlx.url, mlx.model, **{"llm.max_new_tokens": 16}), registry)
    try:
        llm = engine.placements["llm"]
        assert (llm.backend, llm.device, llm.model, llm.endpoint) == ("openai", Device("remote"),
                                                                      mlx.model, mlx.url)
        assert f"on remote {mlx.url}" in llm.describe()
        output = tmp_path / "reply.wav"
        turns, errors = one_turn(engine, load_audio(jfk_path), str(output))
        assert errors == []
        turn = next(t for t in turns if t.reply and not t.cancelled)
        assert "ask not what your country can do for you" in normalize(turn.transcript)
        assert is_english(turn.reply), turn.reply
        # The reply audio is speech: transcribed back, it has words of the reply.
        heard = engine.models["stt"].transcribe(load_audio(output), "en").text
        assert set(normalize(heard).split()) & set(normalize(turn.reply).split()), (heard, turn.reply)
        # Measured like a local stage, plus the network's share.
        for figure in (Figure.LLM_FIRST_TOKEN_S, Figure.LLM_NETWORK_S, Figure.LLM_HEADERS_S,
                       Figure.LLM_FIRST_CHUNK_COMPUTE_S):
            assert turn.value(figure) is not None and turn.value(figure) >= 0, figure
        assert turn.value(Figure.LLM_NETWORK_S) < turn.value(Figure.LLM_FIRST_TOKEN_S)
        assert turn.value(Figure.LLM_TOKENS) >= 1
        assert turn.voice_to_voice is not None
        report = turn_dict(turn)
        assert report["llm_network_s"] is not None and report["llm_first_token_s"] is not None
        assert placement_dict(llm, engine.models["llm"].actual_device)["device"] == "remote"
    finally:
        engine.close()


def test_history_and_options_travel_with_every_request(mlx, registry, proxy, one_two_three_path,
                                                       clean):
    """Two turns of one conversation: the second request carries the first exchange; both
    carry the options."""
    engine = load_engine(remote_config(proxy.url, mlx.model, **{"llm.temperature": 0.0}), registry)
    seen: list[dict] = []
    original = engine.models["llm"].client.openai.chat.completions.create

    def spy(**kwargs):
        seen.append(kwargs)
        return original(**kwargs)

    engine.models["llm"].client.openai.chat.completions.create = spy
    try:
        audio = load_audio(one_two_three_path)
        turns, errors = one_turn(engine, speech_with_gap(audio, audio, 2.0))  # two turns
        assert errors == []
        assert len([t for t in turns if t.reply and not t.cancelled]) == 2
    finally:
        engine.close()
    first, second = seen[0], seen[-1]
    assert first["messages"][0] == {"role": "system", "content": LlmConfig().system_prompt}
    assert first["stream"] is True and first["max_tokens"] == BASE["llm.max_new_tokens"]
    assert first["temperature"] == 0.0
    assert first["extra_body"] is None  # only OpenAI's fields (llm.extra_body is empty)
    assert len(second["messages"]) == len(first["messages"]) + 2  # the first exchange
    assert second["messages"][2]["role"] == "assistant"


# ---------------------------------------------------------------------- placement
def test_placement_and_discovery_probe_the_server_first(mlx, proxy, monkeypatch, clean):
    infos = discover_remote(remote_config(mlx.url, "auto"))
    assert len(infos) == 1 and infos[0].available and infos[0].stages == ("llm",)
    assert infos[0].label == f"remote: 127.0.0.1:{mlx.port} · BaseHTTP/0.6 · {mlx.folder.name}"
    # Nothing listens: refused, named, before anything loads.
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(DeviceError) as err:
        load_engine(remote_config(closed, mlx.model))
    assert closed in str(err.value) and "connection refused" in str(err.value)
    assert "is the server running" in str(err.value)
    # A model the server does not list.
    with pytest.raises(ModelError) as err:
        load_engine(remote_config(mlx.url, "no-such-model"))
    assert "does not serve model 'no-such-model'" in str(err.value) and mlx.model in str(err.value)
    assert "llm.model" in str(err.value)
    # A server wanting a key: none sent, then a wrong one; the key never shows.
    proxy.require_key = SECRET
    with pytest.raises(DeviceError, match=r"401 Unauthorized.*set 'llm\.api_key_env'"):
        load_engine(remote_config(proxy.url, mlx.model))
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    with pytest.raises(DeviceError) as err:
        load_engine(remote_config(proxy.url, mlx.model, **{"llm.api_key_env": KEY_ENV}))
    assert "401" in str(err.value) and KEY_ENV in str(err.value) and "sk-wrong" not in str(err.value)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(Exception, match=f"names the environment variable {KEY_ENV}, which is not set"):
        load_engine(remote_config(proxy.url, mlx.model, **{"llm.api_key_env": KEY_ENV}))
    proxy.require_key = None
    # A server that does not answer in time.
    proxy.delay_s = 6.0
    started = time.monotonic()
    infos = discover_remote(remote_config(proxy.url, mlx.model))
    assert time.monotonic() - started < 5.5
    assert not infos[0].available and "did not answer GET /models within 3 s" in infos[0].reason
    proxy.delay_s = 0.0
    # Every device kind names remote; a local backend cannot run there, nor the VAD.
    with pytest.raises(DeviceError, match="'faster-whisper' cannot run on remote"):
        load_engine(EngineConfig().with_overrides({"stt.device": "remote",
                                                   "stt.backend": "faster-whisper"}))
    with pytest.raises(DeviceError, match="'silero' cannot run on remote; it runs on cpu"):
        load_engine(EngineConfig().with_overrides({"vad.device": "remote"}))
    with pytest.raises(Exception, match=r"'llm.base_url' is empty"):
        load_engine(EngineConfig().with_overrides({"llm.device": "remote"}))


def test_parley_cli_devices_lists_the_server(mlx):
    closed = f"http://127.0.0.1:{free_port()}/v1"
    done = run_cli("devices", "--json", "--llm-base-url", mlx.url, "--tts-base-url", closed,
                   timeout=120)
    assert done.returncode == 0, done.stderr
    remote = [d for d in json.loads(done.stdout)["devices"] if d["device"] == "remote"]
    assert [(d["stages"], d["available"]) for d in remote] == [(["llm"], True), (["tts"], False)]
    assert mlx.folder.name in remote[0]["name"]
    assert "connection refused" in remote[1]["reason"] and closed in remote[1]["reason"]


# ---------------------------------------------------------------------- failures
def test_stopped_mid_reply_then_down_then_back(mlx, registry, proxy, one_two_three_path, clean):
    audio = load_audio(one_two_three_path)
    direct = load_engine(remote_config(mlx.url, mlx.model), registry)
    proxied = load_engine(remote_config(proxy.url, mlx.model, **{"llm.max_new_tokens": 40,
                                                                 "llm.max_sentences": 5}),
                          registry)
    try:
        # The server is killed after its second token: the turn ends, the reply is not
        # asked for again (one request), and the message says what happened.
        proxy.cut_after_events, proxy.on_cut = 2, mlx.kill
        chats = proxy.count(CHAT)
        turns, errors = one_turn(proxied, audio)
        assert proxy.cuts == 1 and proxy.count(CHAT) == chats + 1
        assert len(errors) == 1, errors
        assert errors[0].startswith(f"llm: the LLM server {proxy.url} stopped sending the reply after")
        assert "check that it is running" in errors[0]
        assert all(t.cancelled for t in turns if t.transcript)
        proxy.reset()
        # Down: refused (retried once, then reported).
        turns, errors = one_turn(direct, audio)
        assert len(errors) == 1 and "connection refused" in errors[0] and mlx.url in errors[0]
        # Back: the next turns work, on both engines, without reloading anything.
        mlx.start()
        for engine in (direct, proxied):
            turns, errors = one_turn(engine, audio)
            assert errors == []
            assert is_english(answered(turns))
    finally:
        direct.close()
        proxied.close()


def test_a_wrong_key_at_run_time_and_the_key_never_shows(mlx, registry, proxy, one_two_three_path,
                                                        monkeypatch, caplog, clean):
    caplog.set_level(logging.DEBUG)  # every logger, openai's and the HTTP library's included
    monkeypatch.setenv(KEY_ENV, SECRET)
    proxy.require_key = SECRET
    config = remote_config(proxy.url, mlx.model, **{"llm.api_key_env": KEY_ENV})
    engine = load_engine(config, registry)
    audio = load_audio(one_two_three_path)
    try:
        proxy.require_key = "sk-rotated"  # the server's key changed after the load
        turns, errors = one_turn(engine, audio)
        assert len(errors) == 1, errors
        assert "refused the request (401 Unauthorized)" in errors[0]
        assert f"check the key in the environment variable {KEY_ENV}" in errors[0]
        proxy.require_key = SECRET
        good, errors = one_turn(engine, audio)
        assert errors == [] and answered(good)
        assert f"Bearer {SECRET}" in proxy.auth_seen  # it was sent to the server...
        reports = json.dumps([turn_dict(t) for t in turns + good]
                             + [placement_dict(p, None) for p in engine.placements.values()]
                             + [{k: str(v) for k, v in engine.config.flat().items()}])
        for text in (reports, "\n".join(errors), caplog.text, repr(engine.models["llm"].client),
                     repr(engine.placements["llm"]), str(engine.notes)):
            assert SECRET not in text  # ...and to nothing else
        assert "Bearer" not in caplog.text or "<redacted>" in caplog.text
    finally:
        engine.close()


def test_a_timeout_then_the_next_turn(mlx, registry, proxy, one_two_three_path, clean):
    engine = load_engine(remote_config(proxy.url, mlx.model, **{"llm.timeout_s": 3.0,
                                                                "llm.retries": 0}), registry)
    audio = load_audio(one_two_three_path)
    try:
        proxy.delay_s = 5.0
        turns, errors = one_turn(engine, audio)
        assert len(errors) == 1, errors
        assert f"the LLM server {proxy.url} did not answer within 3 s (timeout)" in errors[0]
        assert "raise 'llm.timeout_s'" in errors[0]
        proxy.delay_s = 0.0
        turns, errors = one_turn(engine, audio)
        assert errors == [] and answered(turns)
    finally:
        engine.close()


def test_5xx_is_retried_429_is_reported_then_the_next_turn(mlx, registry, proxy, one_two_three_path,
                                                            clean):
    engine = load_engine(remote_config(proxy.url, mlx.model), registry)  # llm.retries = 1
    audio = load_audio(one_two_three_path)
    try:
        chats = proxy.count(CHAT)
        proxy.fail = [503]  # once: the retry gets the reply
        turns, errors = one_turn(engine, audio)
        assert errors == [] and answered(turns)
        assert proxy.count(CHAT) == chats + 2
        proxy.fail = [429, 429, 429]  # more than the retries: reported
        chats = proxy.count(CHAT)
        turns, errors = one_turn(engine, audio)
        assert proxy.count(CHAT) == chats + 2  # bounded: the request and one retry
        assert len(errors) == 1
        assert f"the LLM server {proxy.url} is busy (429 Too Many Requests)" in errors[0]
        assert "injected 429" in errors[0]  # what the server said
        proxy.fail = [500, 500]
        turns, errors = one_turn(engine, audio)
        assert len(errors) == 1 and "failed (500 Internal Server Error)" in errors[0]
        assert "check the server's log" in errors[0]
        proxy.fail = []
        turns, errors = one_turn(engine, audio)
        assert errors == [] and answered(turns)
    finally:
        engine.close()


def _load_llm(url: str, model: str, **options):
    from engine.backends.llm.openai_llm import load

    config = dataclasses.replace(LlmConfig(), base_url=url, **options)
    return load(LoadRequest(model, Device("remote"), "auto", config))


def test_a_wrong_model_name_at_request_time(mlx, clean):
    """A model the server does not have (placement would have refused it first): 404."""
    llm = _load_llm(mlx.url, "no-such-model")
    try:
        with pytest.raises(RemoteError) as err:
            list(llm.new_session().generate([{"role": "user", "content": "Hi"}],
                                            GenerationOptions(4), lambda: False))
        assert err.value.kind == "not_found" and err.value.status == 404
        assert f"the LLM server {mlx.url} answered 404 Not Found for model 'no-such-model'" in str(err.value)
        assert "check 'llm.model'" in str(err.value)
    finally:
        llm.close()
    llm = _load_llm(mlx.url, mlx.model)
    try:
        steps = list(llm.new_session().generate([{"role": "user", "content": "Hi"}],
                                                GenerationOptions(4), lambda: False))
        assert steps[-1].finished and "".join(s.text for s in steps)
    finally:
        llm.close()


def test_barge_in_closes_the_stream(mlx, proxy, clean):
    llm = _load_llm(proxy.url, mlx.model)
    gone = proxy.client_gone
    try:
        session = llm.new_session()
        steps = []
        for step in session.generate([{"role": "user", "content": "Tell me a long story."}],
                                     GenerationOptions(60), lambda: len(steps) >= 2):
            steps.append(step)
        assert len(steps) == 2 and not steps[-1].finished
        deadline = time.monotonic() + 20
        while proxy.client_gone == gone and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.client_gone == gone + 1  # the server side saw the client leave
        assert session.figures[Figure.LLM_NETWORK_S] >= 0
    finally:
        llm.close()


# ---------------------------------------------------------------------- the settings panel
def test_the_settings_panel_lists_the_server_as_a_device(mlx, qtbot, clean):
    from app.settings.panel import SettingsPanel
    from engine.runtime.devices import discover_devices

    closed = f"http://127.0.0.1:{free_port()}/v1"
    config = EngineConfig().with_overrides({"llm.base_url": mlx.url, "llm.model": mlx.model,
                                            "tts.base_url": closed})
    panel = SettingsPanel(config)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.remote_probed, timeout=15000):
        panel.set_devices(discover_devices())

    def items(stage):
        combo = panel.device[stage]
        model = combo.model()
        return {combo.itemData(i): (combo.itemText(i), model.item(i).isEnabled(),
                                    combo.itemData(i, 3)) for i in range(combo.count())}

    llm = items("llm")["remote"]
    assert llm[0] == f"remote: 127.0.0.1:{mlx.port} · BaseHTTP/0.6 · {mlx.folder.name}" and llm[1]
    tts = items("tts")["remote"]
    assert not tts[1] and "connection refused" in tts[2] and closed in tts[2]
    assert "remote" not in items("stt") and "remote" not in items("vad")
    assert panel.global_device.findData("remote") < 0
    # A local backend cannot use the server: disabled, saying why.
    panel.backend["llm"].setCurrentIndex(panel.backend["llm"].findData("transformers"))
    llm = items("llm")["remote"]
    assert not llm[1] and "transformers does not run on remote" in llm[2]
    # Choosing it gives the config a remote stage.
    panel.backend["llm"].setCurrentIndex(panel.backend["llm"].findData("openai"))
    panel.device["llm"].setCurrentIndex(panel.device["llm"].findData("remote"))
    assert panel.config_from_widgets().llm.device == "remote"
    assert panel.stop_probing(15)
