"""A full pool refuses before the WebSocket upgrade: HTTP 503 with ``Retry-After`` and an
OpenAI-style JSON error, so a client counts a failed connect and backs off. A unit that
cannot start answers 500; an upgrade that fails gives its unit back; a client retrying in
a loop is logged once. One server with one pipeline, in-process, on the offline models.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from engine.server.app import (RETRY_AFTER_DEFAULT_S, RETRY_AFTER_MAX_S, RETRY_AFTER_MIN_S, RefusalLog,
                               SessionLengths)
from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from tests.support.server import recv_json, wait_free

pytestmark = pytest.mark.slow
ATTEMPTS = 8


@pytest.fixture(scope="module")
def single(server_engine):
    server = ServerThread(server_engine, ServerSettings(port=0, num_pipelines=1))
    server.start()
    yield server
    assert server.stop(20.0), "the server thread did not stop"



def ws(url: str):
    return connect(url, proxy=None, max_size=None)


def openai_connect(server: ServerThread):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="unused-on-loopback", base_url=server.http_url,
                         websocket_base_url=server.http_url.replace("http://", "ws://"))
    return client.realtime.connect(model="parley", websocket_connection_options={"proxy": None})


def refusal_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "parley.server" and "pipelines are in use" in r.getMessage()]


def test_a_full_pool_answers_503_before_the_upgrade_and_logs_once(single, caplog):
    caplog.set_level(logging.INFO, logger="parley.server")
    wait_free(single)

    async def run():
        async with ws(single.url) as first:
            created = await recv_json(first)
            refused = []
            for _ in range(ATTEMPTS):  # a client retrying in a loop
                with pytest.raises(InvalidStatus) as caught:
                    async with ws(single.url):
                        pass
                refused.append(caught.value.response)
            with pytest.raises(InvalidStatus) as by_openai:  # the official client sees it too
                async with openai_connect(single):
                    pass
            busy = await asyncio.to_thread(single.pool_status)
        return created, refused, by_openai.value.response, busy

    created, refused, by_openai, busy = asyncio.run(asyncio.wait_for(run(), 60))
    assert created["type"] == "session.created"
    assert [u["state"] for u in busy["units"]] == ["busy"]  # no unit was started for them
    for response in [*refused, by_openai]:
        assert response.status_code == 503
        assert response.headers["Content-Type"].startswith("application/json")
        assert response.headers["Retry-After"] == str(RETRY_AFTER_DEFAULT_S)  # no session ended yet
        assert json.loads(response.body) == {"error": {
            "type": "invalid_request_error", "code": "session_limit_reached",
            "message": f"all 1 pipelines are in use; try again in {RETRY_AFTER_DEFAULT_S} s",
            "param": None}}
    lines = refusal_lines(caplog)
    assert len(lines) == 1, lines  # one line for nine refusals
    assert lines[0].startswith("refused 127.0.0.1:") and "Retry-After 5 s" in lines[0]

    # The first client left: the next one connects and is served.
    wait_free(single)

    async def after():
        async with ws(single.url) as conn:
            return await recv_json(conn)

    assert asyncio.run(asyncio.wait_for(after(), 60))["type"] == "session.created"


def test_retry_after_follows_the_typical_session_length(single):
    wait_free(single)

    async def run():
        async with ws(single.url) as conn:  # sessions of about 1.5 s
            await recv_json(conn)
            await asyncio.sleep(1.5)
        await asyncio.to_thread(wait_free, single)
        async with ws(single.url) as conn:
            await recv_json(conn)
            with pytest.raises(InvalidStatus) as caught:
                async with ws(single.url):
                    pass
        return caught.value.response

    response = asyncio.run(asyncio.wait_for(run(), 60))
    assert response.status_code == 503
    # The median of the sessions so far is short: the floor, not the default.
    assert int(response.headers["Retry-After"]) == RETRY_AFTER_MIN_S


def test_a_unit_that_cannot_start_answers_500(single, monkeypatch, caplog):
    wait_free(single)

    def broken(*_args):
        raise RuntimeError("no memory for another unit")

    monkeypatch.setattr(single.server.pool, "claim", broken)

    async def run():
        with pytest.raises(InvalidStatus) as caught:
            async with ws(single.url):
                pass
        return caught.value.response

    response = asyncio.run(asyncio.wait_for(run(), 30))
    assert response.status_code == 500
    error = json.loads(response.body)["error"]
    assert (error["type"], error["code"], error["param"]) == ("server_error", "pipeline_start_failed", None)
    assert "no memory" not in error["message"]  # the reason stays in the server's log
    logged = [r for r in caplog.records if "starting a unit for" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_a_failed_upgrade_gives_the_unit_back(single, monkeypatch):
    from aiohttp import web

    wait_free(single)

    async def fails(self, request):
        raise ConnectionResetError("the client went away during the handshake")

    monkeypatch.setattr(web.WebSocketResponse, "prepare", fails)

    async def run():
        with pytest.raises(InvalidStatus):
            async with ws(single.url):
                pass

    asyncio.run(asyncio.wait_for(run(), 30))
    wait_free(single)  # released, not left busy
    monkeypatch.undo()

    async def after():
        async with ws(single.url) as conn:
            return await recv_json(conn)

    assert asyncio.run(asyncio.wait_for(after(), 30))["type"] == "session.created"


def test_a_plain_get_is_refused_without_starting_a_unit(single, monkeypatch):
    wait_free(single)
    claims = []
    monkeypatch.setattr(single.server.pool, "claim", lambda *args: claims.append(args))
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(single.http_url + "/realtime", timeout=10)
    assert caught.value.code == 400 and claims == []
    caught.value.close()


def test_the_refusal_log_keys_by_address_and_reason(caplog):
    caplog.set_level(logging.WARNING, logger="parley.server")
    now = [0.0]
    log = RefusalLog(period_s=60.0, clock=lambda: now[0])
    assert log.refused("10.0.0.1", "full", "refused %s", "a")
    assert not log.refused("10.0.0.1", "full", "refused %s", "a")
    assert not log.refused("10.0.0.1", "full", "refused %s", "a")
    assert log.refused("10.0.0.2", "full", "refused %s", "b")  # another address
    assert log.refused("10.0.0.1", "start", "failed %s", "a")  # another reason
    now[0] = 61.0
    assert log.refused("10.0.0.1", "full", "refused %s", "a")  # a minute later
    assert caplog.messages == ["refused a", "refused b", "failed a",
                               "refused a (2 more from 10.0.0.1 not logged since)"]


def test_retry_after_is_the_median_session_length_less_the_oldest_running():
    lengths = SessionLengths()
    assert lengths.retry_after([100.0]) == RETRY_AFTER_DEFAULT_S  # nothing ended yet
    for seconds in (10.0, 14.0, 12.0):
        lengths.ended(seconds)
    assert lengths.retry_after([3.0, 1.0]) == 9
    assert lengths.retry_after([11.5]) == RETRY_AFTER_MIN_S  # overdue: ask again soon
    for _ in range(3):  # long sessions now: the median is 600 s, capped
        lengths.ended(600.0)
    assert lengths.retry_after([]) == RETRY_AFTER_MAX_S
