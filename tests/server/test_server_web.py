"""The web page's server side: ``/`` and ``/web/*`` served without the key, with their
types and a content security policy; the page's own origin allowed (but not a DNS name
pointed here by someone else); the key accepted as the ``openai-insecure-api-key.<key>``
subprotocol, the answer naming ``realtime``; the page small and packaged.

The guard and the page run in a bare aiohttp app (no models); the WebSocket answer on a
real server with the offline models.
"""

from __future__ import annotations

import asyncio
import re
import tomllib
from fnmatch import fnmatch

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from engine.server.app import guard, subprotocol_key
from engine.server.page import WebPage, is_page_path, page_files
from engine.server.server_settings import ServerSettings
from tests.support.paths import ROOT

KEY = "s3cret-key_1"
WEB = ROOT / "engine" / "server" / "web"


async def _pool(request: web.Request) -> web.Response:
    return web.json_response({"units": []})


def serve(settings: ServerSettings, client):
    """Runs ``client(session, base_url)`` against the guard and the page."""

    async def run():
        app = web.Application(middlewares=[guard(settings)])
        app.router.add_get("/v1/pool", _pool)
        WebPage().register(app)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession() as session:
                return await client(session, f"http://127.0.0.1:{server.port}")
        finally:
            await server.close()

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_the_page_and_its_files_are_served_without_the_key():
    async def client(session, base):
        answers = {}
        for path in ["/", *(f"/web/{name}" for name in sorted(page_files()))]:
            async with session.get(base + path) as r:
                answers[path] = (r.status, r.headers.get("Content-Type"),
                                 r.headers.get("Content-Security-Policy"), await r.read())
        async with session.get(base + "/web/nothing.js") as r:
            missing = r.status
        async with session.get(base + "/web/..%2Fapp.py") as r:
            escaped = r.status
        return answers, missing, escaped

    answers, missing, escaped = serve(ServerSettings(api_key=KEY), client)
    assert answers["/"][0] == 200 and answers["/"][1] == "text/html; charset=utf-8"
    assert b"<title>Parley</title>" in answers["/"][3]
    assert answers["/web/app.js"][1] == "text/javascript; charset=utf-8"
    assert answers["/web/style.css"][1] == "text/css; charset=utf-8"
    for status, _kind, policy, _body in answers.values():
        assert status == 200 and "connect-src 'self'" in policy
    assert (missing, escaped) == (404, 404)


def test_the_other_routes_take_the_key_as_a_header_or_a_subprotocol():
    async def client(session, base):
        statuses = []
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {KEY}"},
                        {"Sec-WebSocket-Protocol": f"realtime, openai-insecure-api-key.{KEY}"},
                        {"Sec-WebSocket-Protocol": "realtime, openai-insecure-api-key.wrong"}):
            async with session.get(base + "/v1/pool", headers=headers) as r:
                statuses.append(r.status)
                if r.status == 401:
                    message = (await r.json())["error"]["message"]
        return statuses, message

    statuses, message = serve(ServerSettings(api_key=KEY), client)
    assert statuses == [401, 401, 200, 200, 401]
    assert "openai-insecure-api-key.<key>" in message and KEY not in message


def test_the_pages_own_origin_is_allowed_but_not_a_name_pointed_here():
    async def client(session, base):
        port = base.rpartition(":")[2]
        cases = [
            ({"Origin": base}, 200),  # the page this server served
            ({"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}, 200),
            ({"Origin": "http://evil.example", "Host": f"127.0.0.1:{port}"}, 403),
            # DNS rebinding: another site's name resolved to this server; same "origin".
            ({"Origin": f"http://evil.example:{port}", "Host": f"evil.example:{port}"}, 403),
            ({"Origin": f"https://127.0.0.1:{port}"}, 403),  # another scheme is another origin
            ({"Origin": "http://allowed.example", "Host": f"127.0.0.1:{port}"}, 200),
        ]
        got = []
        for headers, _want in cases:
            async with session.get(base + "/v1/pool", headers=headers) as r:
                got.append(r.status)
        return [want for _h, want in cases], got

    want, got = serve(ServerSettings(allow_origins=("http://allowed.example",)), client)
    assert got == want


def test_the_key_subprotocol_is_read_as_openai_browser_clients_send_it():
    assert subprotocol_key(f"realtime, openai-insecure-api-key.{KEY}, openai-beta.realtime-v1") == KEY
    assert subprotocol_key(f"realtime,openai-insecure-api-key.{KEY}") == KEY
    assert subprotocol_key("realtime") is None and subprotocol_key("") is None
    assert subprotocol_key("openai-insecure-api-key") is None  # no dot, no key
    assert ServerSettings(port=8765).page_url() == "http://127.0.0.1:8765/"
    assert ServerSettings(host="::1", tls_self_signed=True).page_url(9000) == "https://[::1]:9000/"
    assert is_page_path("/") and is_page_path("/web/app.js")
    assert not is_page_path("/v1/realtime") and not is_page_path("/webhook")


def test_the_page_is_small_complete_and_packaged():
    files = page_files()
    assert sum(len(body) for body, _ in files.values()) < 150 * 1024
    names = set(files)
    # Every module, stylesheet and worklet the page loads is one of its files.
    referenced = set()
    for body, _ in files.values():
        text = body.decode()
        referenced |= set(re.findall(r"""from\s+["']\./([\w.-]+)["']""", text))
        referenced |= set(re.findall(r"""["']/web/([\w.-]+)["']""", text))
    assert referenced and referenced <= names, referenced - names
    assert {"app.js", "style.css", "capture-worklet.js", "playback-worklet.js"} <= referenced
    # No CDN: nothing is loaded from another origin.
    for body, _ in files.values():
        assert not re.search(rb"""(src|href)=["']https?://""", body)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for path in WEB.iterdir():
        assert any(fnmatch(f"web/{path.name}", g) for g in globs["engine.server"]), path.name
    assert "engine/server/web" in (ROOT / "packaging" / "parley.spec").read_text()


@pytest.mark.slow
def test_a_browser_style_connect_gets_realtime_as_its_protocol(server_engine):
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from engine.server.runner import ServerThread
    from tests.support.server import recv_json

    server = ServerThread(server_engine, ServerSettings(port=0, api_key=KEY))
    server.start()

    async def run():
        origin = server.http_url.removesuffix("/v1")
        async with connect(server.url, proxy=None, origin=origin, subprotocols=[
                "realtime", f"openai-insecure-api-key.{KEY}", "openai-agents-sdk.1"]) as ws:
            created = await recv_json(ws)
            chosen = ws.subprotocol
        with pytest.raises(InvalidStatus) as refused:
            async with connect(server.url, proxy=None, origin=origin,
                               subprotocols=["realtime", "openai-insecure-api-key.wrong"]):
                pass
        return created, chosen, refused.value.response.status_code

    try:
        created, chosen, refused = asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        assert server.stop(20.0)
    assert created["type"] == "session.created" and chosen == "realtime" and refused == 401
