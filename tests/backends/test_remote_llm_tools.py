"""The remote LLM backend with tools: a loopback aiohttp server (port 0) that answers every
chat request with a recorded OpenAI stream of two parallel tool calls
(tests/backends/data/tool_calls/openai_gpt-4o_two_calls.sse; source in the README there),
sent in small uneven pieces, and keeps each request's JSON body for the test to read."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from engine.backends.base import GenerationOptions, LoadRequest, ToolSpec
from engine.backends.llm.openai_llm import load
from engine.backends.llm.tool_calls import ToolCallError
from engine.config import LlmConfig
from engine.errors import ConfigError
from engine.runtime.devices import Device
from tests.support.loopback import LoopbackServer

RECORDED = (Path(__file__).parent / "data" / "tool_calls" / "openai_gpt-4o_two_calls.sse").read_bytes()
MODEL = "gpt-4o-2024-08-06"
# The recording's tools (openai.pydantic_function_tool of its two models).
WEATHER = ToolSpec("GetWeatherArgs", "", {
    "type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"},
                                     "units": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "country"]})
STOCK = ToolSpec("get_stock_price", "Fetch the latest price for a given ticker", {
    "type": "object", "properties": {"ticker": {"type": "string"}, "exchange": {"type": "string"}},
    "required": ["ticker", "exchange"]})
QUESTION = [{"role": "user", "content": "What's the weather like in Edinburgh?"},
            {"role": "user", "content": "What's the price of AAPL?"}]


class RecordedServer(LoopbackServer):
    """``POST /v1/chat/completions`` answered with ``body`` (an SSE stream) in pieces of
    ``piece`` bytes; the decoded request bodies are kept in ``requests``."""

    name = "recorded LLM server"

    def __init__(self, body: bytes, piece: int = 97) -> None:
        super().__init__()
        self.body, self.piece = body, piece
        self.requests: list[dict] = []
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def routes(self, app) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    async def _chat(self, request):
        from aiohttp import web

        self.requests.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for start in range(0, len(self.body), self.piece):  # events split mid-line, as TCP may
            await response.write(self.body[start:start + self.piece])
        await response.write_eof()
        return response


@pytest.fixture
def server():
    recorded = RecordedServer(RECORDED)
    yield recorded
    recorded.close()


@pytest.fixture
def llm(server):
    config = dataclasses.replace(LlmConfig(), backend="openai", base_url=server.url, model=MODEL)
    remote = load(LoadRequest(MODEL, Device("remote"), "auto", config))
    yield remote
    remote.close()


def reply(llm, messages=QUESTION, **options):
    return list(llm.new_session().generate(messages, GenerationOptions(max_new_tokens=60, **options),
                                           lambda: False))


def test_the_request_carries_the_tools_and_the_calls_arrive_joined_on_the_last_step(llm, server):
    assert llm.tool_support() is None
    steps = reply(llm, tools=(WEATHER, STOCK))
    (request,) = server.requests
    assert request["tools"] == [WEATHER.as_openai(), STOCK.as_openai()]
    assert request["tool_choice"] == "auto" and request["messages"] == QUESTION
    assert [s.text for s in steps] == [""] and steps[-1].finished  # no content: only the last step
    weather, stock = steps[-1].tool_calls
    assert (weather.call_id, weather.name) == ("call_lQnnsesjFMWMQ5IeWPHzR4th", "GetWeatherArgs")
    assert (stock.call_id, stock.name) == ("call_2xjOUgaCdiwAcl9ZBL9LyMUU", "get_stock_price")
    # The argument pieces, joined in order, then checked and kept as compact JSON.
    pieces = re.findall(r'"index":0,"function":\{"arguments":"((?:[^"\\]|\\.)*)"\}', RECORDED.decode())
    joined = json.loads('"' + "".join(pieces) + '"')
    assert joined == '{"city": "Edinburgh", "country": "UK", "units": "c"}'
    assert weather.arguments == '{"city":"Edinburgh","country":"UK","units":"c"}'
    assert stock.arguments == '{"ticker":"AAPL","exchange":"NASDAQ"}'
    assert steps[-1].tokens == 60  # the server's count (usage.completion_tokens)


def test_tool_choice_goes_out_in_the_openai_form(llm, server):
    reply(llm, tools=(WEATHER, STOCK), tool_choice="required")
    reply(llm, tools=(WEATHER, STOCK), tool_choice="get_stock_price")
    reply(llm, tools=(WEATHER, STOCK), tool_choice="none")
    assert [r["tool_choice"] for r in server.requests] == [
        "required", {"type": "function", "function": {"name": "get_stock_price"}}, "none"]
    assert all(len(r["tools"]) == 2 for r in server.requests)  # the server restricts, not us


def test_without_tools_the_request_is_the_plain_one_and_calls_are_not_taken(llm, server):
    # The recorded reply calls two tools; calls nobody offered are an error, not dropped.
    with pytest.raises(ToolCallError, match="'GetWeatherArgs' is not an offered tool; offered: none"):
        reply(llm)
    assert "tools" not in server.requests[0] and "tool_choice" not in server.requests[0]
    with pytest.raises(ToolCallError, match="offered tool; offered: get_stock_price"):
        reply(llm, tools=(STOCK,))


def test_a_tool_choice_that_names_no_tool_is_refused_before_any_request(llm, server):
    with pytest.raises(ConfigError, match=r"'get_weather'.*offered: GetWeatherArgs, get_stock_price"):
        reply(llm, tools=(WEATHER, STOCK), tool_choice="get_weather")
    assert server.requests == []


def test_history_with_calls_and_tool_answers_is_sent_unchanged(llm, server):
    history = [*QUESTION,
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_lQnnsesjFMWMQ5IeWPHzR4th", "type": "function", "function": {
                       "name": "GetWeatherArgs", "arguments": '{"city":"Edinburgh","country":"UK"}'}}]},
               {"role": "tool", "tool_call_id": "call_lQnnsesjFMWMQ5IeWPHzR4th", "content": '{"temp_c": 11}'}]
    reply(llm, history, tools=(WEATHER, STOCK))
    assert server.requests[0]["messages"] == history
