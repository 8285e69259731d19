"""The remote LLM backend against a strict OpenAI-schema server (``ChatServer(strict=True)``,
which refuses any field OpenAI's chat-completions API does not know, as OpenAI does):
Parley's default request is accepted; extras go out only when named in
``llm.extra_body``; a refused field is an error that names it and where it came from;
an anti-repetition value of the user's is a ConfigError before any request."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.backends.base import GenerationOptions, LoadRequest, ToolSpec
from engine.backends.llm.openai_llm import load
from engine.backends.remote import RemoteError, http_library, refused_field
from engine.config import EngineConfig, LlmConfig, config_from_dict
from engine.errors import ConfigError
from engine.runtime.devices import Device
from tests.support.chat_server import OPENAI_CHAT_FIELDS, ChatServer, schema_error

MODEL = "parley-test-llm"
QUESTION = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Tell me something."}]
WEATHER = ToolSpec("get_weather", "The weather in a city", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


@pytest.fixture
def server():
    strict = ChatServer(MODEL, reply="Here is a short answer.", strict=True, delay_s=0.0)
    yield strict
    strict.close()


def remote(server: ChatServer, **settings):
    """The remote LLM loaded as the app loads it, from the default ``llm`` section plus
    ``settings`` (dotted keys without ``llm.``)."""
    config = EngineConfig().with_overrides({"llm.backend": "openai", "llm.base_url": server.url,
                                            "llm.model": MODEL, "llm.retries": 2,
                                            **{f"llm.{k}": v for k, v in settings.items()}}).llm
    return load(LoadRequest(MODEL, Device("remote"), "auto", config)), config


def reply(llm, config: LlmConfig, **options) -> tuple[str, list]:
    steps = list(llm.new_session().generate(
        QUESTION, dataclasses.replace(GenerationOptions.from_config(config), **options), lambda: False))
    return "".join(s.text for s in steps), list(steps[-1].tool_calls)


def test_strict_server_refuses_what_openai_refuses():
    ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
          "stream_options": {"include_usage": True}, "max_tokens": 5, "temperature": 0.0}
    assert schema_error(ok) is None
    assert schema_error({**ok, "repetition_penalty": 1.3}) == (
        "Unrecognized request argument supplied: repetition_penalty")
    assert schema_error({**ok, "stream_options": {"cache": True}}) == (
        "Unrecognized request argument supplied: stream_options.cache")
    assert schema_error({**ok, "messages": [{"role": "user", "content": "hi", "reasoning": "x"}]}) == (
        "Unrecognized request argument supplied: messages[0].reasoning")
    assert str(schema_error({**ok, "temperature": 3})).startswith("Invalid 'temperature'")


def test_default_request_is_standard_openai_and_answered(server):
    llm, config = remote(server)
    try:
        text, _calls = reply(llm, config)
    finally:
        llm.close()
    assert text == "Here is a short answer."
    assert server.refused == []
    (body,) = server.requests
    assert set(body) <= OPENAI_CHAT_FIELDS
    assert "repetition_penalty" not in body and "no_repeat_ngram_size" not in body
    assert body["max_tokens"] == LlmConfig().max_new_tokens and body["temperature"] == 0.0


def test_request_with_tools_is_standard_and_the_call_comes_back(server):
    llm, config = remote(server)
    try:
        session = llm.new_session()
        options = dataclasses.replace(GenerationOptions.from_config(config), tools=(WEATHER,))
        steps = list(session.generate([{"role": "user", "content": "What's the weather in Paris?"}],
                                      options, lambda: False))
    finally:
        llm.close()
    assert server.refused == []
    (call,) = steps[-1].tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments)["city"]
    assert server.requests[0]["tools"] == [WEATHER.as_openai()]


def test_extra_body_fields_go_out_only_when_named(server):
    llm, config = remote(server, extra_body={"seed": 7, "user": "parley-test"})
    try:
        text, _ = reply(llm, config)
    finally:
        llm.close()
    assert text == "Here is a short answer."
    assert server.requests[0]["seed"] == 7 and server.requests[0]["user"] == "parley-test"


def test_a_refused_extra_is_an_error_naming_it_and_the_setting(server):
    llm, config = remote(server, extra_body={"top_k": 20})
    try:
        with pytest.raises(RemoteError) as caught:
            reply(llm, config)
    finally:
        llm.close()
    error = caught.value
    assert error.status == 400 and error.kind == "rejected"
    assert "the refused field is 'top_k'" in str(error)
    assert "llm.extra_body" in str(error) and "Unrecognized request argument supplied: top_k" in str(error)
    assert len(server.requests) == 1  # a refusal is not retried


def test_an_anti_repetition_value_of_the_users_is_a_config_error_before_any_request(server):
    with pytest.raises(ConfigError) as caught:
        remote(server, repetition_penalty=1.5)
    message = str(caught.value)
    assert "'llm.repetition_penalty' = 1.5" in message and "llm.extra_body" in message
    # Changed while loaded (a runtime setting): the reply fails before it is sent.
    llm, config = remote(server)
    try:
        with pytest.raises(ConfigError, match=r"'llm\.no_repeat_ngram_size' = 2"):
            reply(llm, config, no_repeat_ngram_size=2)
    finally:
        llm.close()
    assert server.requests == []


def test_extra_body_setting_is_a_checked_table():
    config = config_from_dict({"llm": {"extra_body": {"repetition_penalty": 1.1,
                                                      "chat_template_kwargs": {"enable_thinking": False}}}})
    assert config.llm.extra_fields() == {"repetition_penalty": 1.1,
                                         "chat_template_kwargs": {"enable_thinking": False}}
    # A flag or a saved setting gives the same as JSON text; the canonical text round-trips.
    again = EngineConfig().with_overrides({"llm.extra_body": config.llm.extra_body})
    assert again.llm == config.llm
    assert EngineConfig().with_overrides({"llm.extra_body": ""}).llm.extra_fields() == {}
    for raw, says in (("[1, 2]", "must be a table of fields"),
                      ("{not json", "is not JSON"),
                      ({"messages": []}, "may not set 'messages': Parley sets it"),
                      ({"temperature": 0.5}, "may not set 'temperature'")):
        with pytest.raises(ConfigError, match=r"'llm\.extra_body'") as caught:
            EngineConfig().with_overrides({"llm.extra_body": raw})
        assert says in str(caught.value)
    import datetime

    with pytest.raises(ConfigError, match="a value JSON cannot carry"):
        config_from_dict({"llm": {"extra_body": {"when": datetime.date(2026, 1, 1)}}})


def _bad_request(body: object):
    import openai

    hx = http_library()
    request = hx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return openai.BadRequestError("Error code: 400", response=hx.Response(400, request=request, json=body),
                                  body=body)


def test_refused_field_is_read_from_each_servers_way_of_saying_it():
    sent = ["top_k", *OPENAI_CHAT_FIELDS]
    # OpenAI, with param set.
    assert refused_field(_bad_request({"message": "bad", "param": "top_k"}), sent) == "top_k"
    assert refused_field(_bad_request({"message": "bad", "param": "messages[1].content"}),
                         sent) == "messages"
    # FastAPI / pydantic with extra="forbid".
    detail = {"detail": [{"type": "extra_forbidden", "loc": ["body", "top_k"],
                          "msg": "Extra inputs are not permitted", "input": 20}]}
    assert refused_field(_bad_request(detail), sent) == "top_k"
    # vLLM: the pydantic list quoted in its message.
    vllm = {"object": "error", "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'top_k'), "
                                          "'msg': 'Extra inputs are not permitted'}]",
            "type": "BadRequestError", "param": None, "code": 400}
    assert refused_field(_bad_request(vllm), sent) == "top_k"
    # Nothing that names a field sent.
    assert refused_field(_bad_request({"message": "prompt too long"}), sent) is None
    assert refused_field(ValueError("not an HTTP error"), sent) is None
