"""The remote-stage probe on a server whose ``GET /v1/models`` cannot be read.

``mlx_lm.server`` with no Hugging Face cache folder answers ``/v1/models`` with 200 and an
empty body. The probe then checks the configured model with one small request (a
one-token chat completion for the LLM, silence to transcribe for STT, a word to speak for
TTS) and its note says what the server sent. A loopback aiohttp server here answers
exactly that way, and records what it was asked.
"""

from __future__ import annotations

import json

import pytest

from engine.backends.remote_probe import discover_remote, probe_stage
from engine.config import EngineConfig
from tests.support.loopback import LoopbackServer


class EmptyModelsServer(LoopbackServer):
    """``/v1/models``: 200 with an empty body (or ``models_body``); chat completions,
    transcriptions and speech answered as a real server would (or with ``fail_status``)."""

    name = "empty-models server"

    def __init__(self) -> None:
        super().__init__()
        self.models_body = b""
        self.fail_status: int | None = None
        self.asked: list[tuple[str, dict]] = []  # (path, JSON body or form fields)
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def routes(self, app) -> None:
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speech)

    def _failure(self):
        from aiohttp import web

        if self.fail_status is None:
            return None
        return web.json_response({"error": {"message": "model not found"}}, status=self.fail_status)

    async def _models(self, request):
        from aiohttp import web

        self.asked.append((request.path, {}))
        return web.Response(status=200, body=self.models_body)

    async def _chat(self, request):
        from aiohttp import web

        body = await request.json()
        self.asked.append((request.path, body))
        if (failure := self._failure()) is not None:
            return failure
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "Hello"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    async def _transcribe(self, request):
        from aiohttp import web

        form = await request.post()
        audio = form["file"]
        self.asked.append((request.path, {"model": form["model"], "bytes": len(audio.file.read())}))
        if (failure := self._failure()) is not None:
            return failure
        return web.json_response({"text": ""})

    async def _speech(self, request):
        from aiohttp import web

        body = await request.json()
        self.asked.append((request.path, body))
        if (failure := self._failure()) is not None:
            return failure
        return web.Response(body=bytes(4800), content_type="audio/pcm")


@pytest.fixture(scope="module")
def served():
    server = EmptyModelsServer()
    yield server
    server.close()


@pytest.fixture
def server(served):
    served.models_body, served.fail_status = b"", None
    served.asked.clear()
    return served


def section(stage: str, url: str, model: str, **more):
    config = EngineConfig().with_overrides({f"{stage}.backend": "openai", f"{stage}.base_url": url,
                                            f"{stage}.model": model, **more})
    return config, config.stage_config(stage)


def test_an_empty_model_list_falls_back_to_a_one_token_chat_completion(server):
    config, llm = section("llm", server.url, "mlx-community/SmolLM2")
    result, problem = probe_stage("llm", llm)
    assert result.ok and problem is None, result.reason
    assert result.models == ("mlx-community/SmolLM2",)
    assert "answered GET /models with 200 OK with an empty body" in result.note
    assert "'mlx-community/SmolLM2' answered a one-token chat completion" in result.note
    chats = [body for path, body in server.asked if path == "/v1/chat/completions"]
    assert len(chats) == 1
    assert chats[0]["model"] == "mlx-community/SmolLM2" and chats[0]["max_tokens"] == 1
    # The device list shows the server as usable too.
    infos = discover_remote(config)
    assert infos[0].available, infos[0].reason
    assert infos[0].label.endswith("· mlx-community/SmolLM2")


def test_a_body_that_is_not_json_is_described(server):
    server.models_body = b"<html>hello</html>"
    _config, llm = section("llm", server.url, "m")
    result, _problem = probe_stage("llm", llm)
    assert result.ok
    assert "a body that is not JSON" in result.note and "<html>hello</html>" in result.note


def test_the_fallback_failing_names_what_was_tried(server):
    server.fail_status = 404
    _config, llm = section("llm", server.url, "no-such-model")
    result, problem = probe_stage("llm", llm)
    assert not result.ok
    assert "200 OK with an empty body, not a model list" in problem
    assert "checked instead with a request for model 'no-such-model', which failed" in problem
    assert "404 Not Found" in problem and result.error is not None and result.error.kind == "not_found"
    assert "cannot read" not in problem


def test_model_auto_cannot_be_chosen_without_a_list(server):
    _config, llm = section("llm", server.url, "auto")
    result, problem = probe_stage("llm", llm)
    assert not result.ok and "set 'llm.model'" in problem and "model auto cannot be chosen" in problem
    assert [path for path, _ in server.asked] == ["/v1/models"]  # nothing was generated


def test_stt_and_tts_are_checked_with_one_small_request(server):
    _config, stt = section("stt", server.url, "whisper-1")
    result, problem = probe_stage("stt", stt)
    assert result.ok and problem is None, result.reason
    assert "a quarter second of silence to transcribe" in result.note
    transcribed = [body for path, body in server.asked if path == "/v1/audio/transcriptions"]
    assert transcribed == [{"model": "whisper-1", "bytes": 44 + 8000}]

    _config, tts = section("tts", server.url, "tts-1", **{"tts.voice": "af_heart"})
    result, problem = probe_stage("tts", tts)
    assert result.ok and problem is None, result.reason
    assert "one word to speak" in result.note
    spoken = [body for path, body in server.asked if path == "/v1/audio/speech"]
    assert len(spoken) == 1 and spoken[0]["voice"] == "af_heart" and spoken[0]["model"] == "tts-1"
    assert spoken[0]["response_format"] == "pcm"


def test_a_real_model_list_needs_no_fallback(server):
    server.models_body = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "mlx_lm"}]}).encode()
    _config, llm = section("llm", server.url, "m")
    result, problem = probe_stage("llm", llm)
    assert result.ok and problem is None and result.note == "" and result.server == "mlx_lm.server"
    assert [path for path, _ in server.asked] == ["/v1/models"]


def test_placement_takes_the_stage_on_such_a_server(server):
    from engine.engine import Engine

    config, _llm = section("llm", server.url, "m")
    engine = Engine(config)  # placement probes; nothing loads
    try:
        placement = engine.placements["llm"]
        assert (placement.device.kind, placement.model, placement.endpoint) == ("remote", "m", server.url)
    finally:
        engine.close()
