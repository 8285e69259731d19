"""``/mcp`` on the realtime server: Parley's MCP tools over the streamable-HTTP transport,
driven by the MCP SDK's own HTTP client on a loopback server (real models, the bundled
offline stack), with jfk.flac in place of the microphone and a recording sink in place
of the speaker; behind the same request checks as every route."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from tests.support.mcp_servers import check_speak_and_ask
from tests.support.paths import ROOT
from tests.support.server import wait_free

pytest.importorskip("mcp")

JFK = ROOT / "resources" / "audio" / "jfk.flac"
KEY = "mcp-test-key-0123456789abcdef"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"}}}


@pytest.fixture(scope="module")
def speakers() -> list:
    """The sinks the tool calls played into, one per call, in order."""
    return []


@pytest.fixture(scope="module")
def mcp_server(server_engine, speakers):
    """A keyed loopback server with one pipeline and /mcp, whose calls hear jfk.flac and
    play into recording sinks."""
    from engine.audio.decode import load_audio
    from engine.audio.file_sink import FileSink
    from engine.mcp_server.microphone import RecordingMicrophone
    from engine.recording import trailing_silence_s
    from engine.server.mcp_route import McpDevices

    recording = load_audio(str(JFK))
    silence_s = trailing_silence_s(server_engine.config)

    def devices() -> McpDevices:
        microphone = RecordingMicrophone(recording, silence_s)
        speaker = FileSink(None, realtime=True)
        speakers.append(speaker)
        return McpDevices(microphone, speaker, on_listen=microphone.play)

    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1, api_key=KEY),
                          mcp_devices=devices)
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"


def _mcp_url(server: ServerThread, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{server.port}/mcp"


async def _session(url: str, calls, key: str | None = KEY):
    """Run ``calls(client)`` in an initialized MCP session over streamable HTTP."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as client:
        await client.initialize()
        return await calls(client)


def _post(url: str, headers: dict[str, str]) -> tuple[int, dict]:
    """POST an MCP ``initialize`` with plain urllib (no proxy); the status and JSON body."""
    request = urllib.request.Request(url, data=json.dumps(INITIALIZE).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream",
                                              **headers})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as answer:
            answer.read()  # the whole answer (an SSE stream that ends after the result)
            return answer.status, {}
    except urllib.error.HTTPError as refused:
        body = refused.read()
        return refused.code, json.loads(body) if body.startswith(b"{") else {}


@pytest.mark.slow
def test_an_mcp_client_speaks_and_asks_over_http(mcp_server, speakers, loopback_without_proxy):
    async def calls(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        speak = await client.call_tool("speak", {"text": "Hello from Parley. The build passed."})
        asked = await client.call_tool("ask", {"text": "What did the president say?",
                                               "timeout_s": 60})
        return tools, speak, asked

    before = len(speakers)
    tools, speak, asked = asyncio.run(_session(_mcp_url(mcp_server), calls))
    assert set(tools) >= {"speak", "listen", "ask"}
    check_speak_and_ask(speak, asked)
    # Each call had its own unit and speaker, and the pool has its unit back.
    assert len(speakers) == before + 2
    said = speakers[before]  # what speak said was played on its speaker
    assert said.sample_rate and said.audio.size / said.sample_rate > 1.0
    assert mcp_server.pool_status()["units"][0]["state"] == "free"


@pytest.mark.slow
def test_a_call_that_finds_every_pipeline_busy_is_a_tool_error(mcp_server, loopback_without_proxy):
    from websockets.asyncio.client import connect

    async def run():
        headers = {"Authorization": f"Bearer {KEY}"}
        async with connect(mcp_server.url, proxy=None, additional_headers=headers):
            for _ in range(100):  # the realtime client holds the one unit
                if mcp_server.pool_status()["units"][0]["state"] == "busy":
                    break
                await asyncio.sleep(0.05)
            return await _session(_mcp_url(mcp_server), lambda client: client.call_tool(
                "speak", {"text": "Nobody hears this."}))

    refused = asyncio.run(run())
    assert refused.is_error
    assert "all 1 pipelines of this server are in use" in refused.content[0].text


@pytest.mark.slow
def test_a_second_call_while_one_runs_is_a_tool_error(mcp_server, loopback_without_proxy):
    wait_free(mcp_server)  # a realtime client before this test gives its unit back after it left

    async def calls(client):
        first = asyncio.create_task(client.call_tool(
            "speak", {"text": "One thing at a time, please. I am still speaking."}))
        await asyncio.sleep(0.5)
        second = await client.call_tool("speak", {"text": "Me too."})
        return await first, second

    first, second = asyncio.run(_session(_mcp_url(mcp_server), calls))
    assert not first.is_error and first.structured_content["played"] is True
    assert second.is_error and "another MCP tool call" in second.content[0].text


def test_mcp_without_the_key_is_refused(mcp_server):
    status, body = _post(_mcp_url(mcp_server), {})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    status, _ = _post(_mcp_url(mcp_server), {"Authorization": "Bearer wrong-key"})
    assert status == 401


def test_mcp_for_another_host_is_refused(mcp_server):
    status, body = _post(_mcp_url(mcp_server), {"Authorization": f"Bearer {KEY}",
                                                "Host": f"evil.example:{mcp_server.port}"})
    assert status == 403 and body["error"]["code"] == "host_not_allowed"


def test_mcp_with_the_key_answers_the_protocol(mcp_server):
    status, _ = _post(_mcp_url(mcp_server), {"Authorization": f"Bearer {KEY}"})
    assert status == 200


def test_a_server_without_mcp_devices_has_no_mcp_route(server_engine):
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1), first_unit=2)
    server.start()
    try:
        status, _ = _post(_mcp_url(server), {})
    finally:
        assert server.stop(20.0)
    assert status == 404
