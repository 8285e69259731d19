"""Serving off loopback safely: plain ws:// refused there without ``--insecure-plaintext``,
weak keys refused (or one generated), wrong keys throttled per address (429 with
``Retry-After``), the ``Host`` allow-list (DNS rebinding), CORS on the HTTP routes.

The request checks run in a bare aiohttp app (no models); the session limits and the
compute gate on the HTTP routes in ``test_server_limits.py``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from engine.cli.main import build_parser
from engine.cli.serve import settings_from_args
from engine.errors import ConfigError
from engine.server.limits import KeyThrottle, SessionLimits
from engine.server.request_guard import RequestGuard, host_name
from engine.server.server_settings import ServerSettings, generate_key, key_problem
from tests.support.cli import run_cli
from tests.support.server import free_port

STRONG = "Kq3-vX9_tR7pLm2.Zw8~Yd"  # 22 characters, 21 different
OWN = ("localhost", "parley-box", "parley-box.local", "127.0.0.1", "::1", "192.168.1.20")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# ---------------------------------------------------------------------- plaintext, keys
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "127.0.0.2"])
def test_plaintext_off_loopback_is_refused_without_the_flag(host):
    with pytest.raises(ConfigError, match="in clear") as refused:
        ServerSettings(host=host, api_key=STRONG).check()
    message = str(refused.value)
    assert "--tls-self-signed" in message and "--insecure-plaintext" in message
    ServerSettings(host=host, api_key=STRONG, insecure_plaintext=True).check()
    ServerSettings(host=host, api_key=STRONG, tls_self_signed=True).check()
    ServerSettings(host=host, api_key=STRONG, tls_cert="c.pem", tls_key="k.pem").check()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_serves_plaintext_and_any_key(host):
    ServerSettings(host=host).check()
    ServerSettings(host=host, api_key="short").check()


def test_the_cli_refuses_plaintext_off_loopback_before_loading_anything():
    start = time.monotonic()
    result = run_cli("serve", "--host", "127.0.0.2", "--port", str(free_port()),
                     env={"PARLEY_API_KEY": STRONG}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "--insecure-plaintext" in result.stderr and "--tls-self-signed" in result.stderr
    assert "models ready" not in result.stderr and "[llm" not in result.stderr
    assert STRONG not in result.stderr
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(("key", "why"), [
    ("sk-1234", "7 characters"),
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "1 different"),
    ("abababababababababababab", "2 different"),
    ("password1password1password1", "8 different"),
])
def test_a_weak_key_is_refused_off_loopback_with_how_to_make_one(key, why):
    assert key_problem(key) is not None
    with pytest.raises(ConfigError, match=why) as refused:
        ServerSettings(host="0.0.0.0", api_key=key, tls_self_signed=True).check()
    message = str(refused.value)
    assert "secrets.token_urlsafe(32)" in message and "--api-key generate" in message
    assert key not in message


@pytest.mark.parametrize("key", ["has space-in-it-0123456789", "comma,separated-0123456789",
                                 "ünïcode-key-0123456789"])
def test_a_key_a_browser_cannot_send_is_refused_everywhere(key):
    for host in ("127.0.0.1", "0.0.0.0"):
        with pytest.raises(ConfigError, match=r"letters, digits and -_\.~"):
            ServerSettings(host=host, api_key=key, tls_self_signed=True).check()


def test_api_key_generate_makes_a_strong_new_key_each_time():
    keys = {generate_key() for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        ServerSettings(host="0.0.0.0", api_key=key, tls_self_signed=True).check()
    args = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--api-key", "generate",
                                      "--tls-self-signed"])
    first, second = settings_from_args(args, {}), settings_from_args(args, {})
    assert first.api_key != "generate" and first.api_key != second.api_key
    assert len(first.api_key or "") >= 40
    first.check()


def test_the_new_flags_make_the_settings():
    args = build_parser().parse_args([
        "serve", "--host", "0.0.0.0", "--insecure-plaintext", "--allow-host", "parley.example.org",
        "--allow-host", "proxy.lan", "--idle-timeout-s", "90", "--max-session-s", "0"])
    settings = settings_from_args(args, {"PARLEY_API_KEY": STRONG})
    assert settings.insecure_plaintext and settings.allow_hosts == ("parley.example.org", "proxy.lan")
    assert (settings.idle_timeout_s, settings.max_session_s) == (90.0, 0.0)
    settings.check()
    defaults = settings_from_args(build_parser().parse_args(["serve"]), {})
    assert not defaults.insecure_plaintext and defaults.idle_timeout_s > 0 and defaults.max_session_s > 0


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("idle_timeout_s", 0.5, "--idle-timeout-s"), ("idle_timeout_s", float("inf"), "--idle-timeout-s"),
    ("max_session_s", -1.0, "--max-session-s"), ("allow_hosts", ("http://x.example",), "--allow-host"),
    ("allow_hosts", ("x.example:8765",), "--allow-host"),
])
def test_bad_new_settings_name_their_flag(field, value, flag):
    with pytest.raises(ConfigError, match=flag):
        ServerSettings(**{field: value}).check()


# ---------------------------------------------------------------------- the throttle
def test_wrong_keys_are_throttled_per_address_with_a_growing_lockout():
    clock = FakeClock()
    throttle = KeyThrottle(allowed=5, window_s=60, lockout_s=30, max_lockout_s=100, clock=clock)
    for _ in range(4):
        assert throttle.failed("10.0.0.1") is None
        assert throttle.retry_after("10.0.0.1") is None
    assert throttle.failed("10.0.0.1") == 30  # the fifth within the window
    assert throttle.retry_after("10.0.0.1") == 30
    assert throttle.retry_after("10.0.0.2") is None  # per address
    clock.t += 29.5
    assert throttle.retry_after("10.0.0.1") == 1
    clock.t += 0.5
    assert throttle.retry_after("10.0.0.1") is None
    assert throttle.failed("10.0.0.1") == 60  # wrong again at once: twice as long
    clock.t += 60
    assert throttle.failed("10.0.0.1") == 100  # capped
    clock.t += 100 + 61  # a window without a wrong key: a fresh start
    assert throttle.failed("10.0.0.1") is None
    throttle.succeeded("10.0.0.1")  # a right key forgets the wrong ones
    for _ in range(4):
        assert throttle.failed("10.0.0.1") is None


def test_wrong_keys_spread_over_more_than_the_window_are_not_throttled():
    clock = FakeClock()
    throttle = KeyThrottle(allowed=3, window_s=10, clock=clock)
    for _ in range(10):
        assert throttle.failed("10.0.0.1") is None
        clock.t += 6  # two per window at most


# ---------------------------------------------------------------------- through the guard
async def _pool(request: web.Request) -> web.Response:
    return web.json_response({"units": []})


async def _streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def serve(guard: RequestGuard, client):
    """Runs ``client(session, base_url, port)`` against ``guard`` over a bare app: the
    pool route, a streamed POST route (as chat completions), the page."""

    async def run():
        from engine.server.page import WebPage

        app = web.Application()
        guard.install(app)
        app.router.add_get("/v1/pool", _pool)
        app.router.add_post("/v1/chat/completions", _streamed)
        WebPage().register(app)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession() as session:
                return await client(session, f"http://127.0.0.1:{server.port}", server.port)
        finally:
            await server.close()

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_after_n_wrong_keys_an_address_gets_429_with_retry_after_even_with_the_right_key():
    throttle = KeyThrottle(allowed=3, lockout_s=30)
    guard = RequestGuard(ServerSettings(api_key=STRONG), throttle=throttle, own_names=OWN)

    async def client(session, base, _port):
        answers = []
        for headers in ({}, {}, {}, {}):  # no key at all: not a guess, never throttled
            async with session.get(base + "/v1/pool", headers=headers) as r:
                answers.append(r.status)
        for key in ("wrong-1", "wrong-2", "wrong-3", STRONG):
            async with session.get(base + "/v1/pool", headers={"Authorization": f"Bearer {key}"}) as r:
                answers.append((r.status, r.headers.get("Retry-After"), (await r.json())["error"]["code"]
                                if r.status != 200 else None))
        async with session.get(base + "/") as r:  # the page needs no key, so no throttle
            answers.append(r.status)
        return answers

    answers = serve(guard, client)
    assert answers[:4] == [401] * 4
    assert answers[4:6] == [(401, None, "invalid_api_key")] * 2
    assert answers[6] == (429, "30", "too_many_wrong_keys")
    assert answers[7][0] == 429 and 29 <= int(answers[7][1]) <= 30  # checked before the key
    assert answers[8] == 200


def test_the_key_subprotocol_counts_as_a_guess_too():
    guard = RequestGuard(ServerSettings(api_key=STRONG), throttle=KeyThrottle(allowed=2),
                         own_names=OWN)

    async def client(session, base, _port):
        statuses = []
        for _ in range(3):
            async with session.get(base + "/v1/pool", headers={
                    "Sec-WebSocket-Protocol": "realtime, openai-insecure-api-key.guess"}) as r:
                statuses.append(r.status)
        return statuses

    assert serve(guard, client) == [401, 429, 429]


def test_host_names_not_this_machines_are_refused_on_every_route():
    guard = RequestGuard(ServerSettings(allow_hosts=("parley.example.org",)), own_names=OWN)

    async def client(session, base, port):
        got = {}
        for host in ("127.0.0.1", "localhost", "LOCALHOST.", "app.localhost", "parley-box",
                     "parley-box.local", "[::1]", "192.168.1.20", "10.9.8.7", "parley.example.org",
                     "evil.example", "parley-box.evil.example", "localhost.evil.example"):
            for path in ("/v1/pool", "/"):
                async with session.get(base + path, headers={"Host": f"{host}:{port}"}) as r:
                    body = await r.json() if r.status == 403 else None
                    got[(host, path)] = (r.status, body and body["error"]["code"])
        return got

    got = serve(guard, client)
    for host in ("evil.example", "parley-box.evil.example", "localhost.evil.example"):
        for path in ("/v1/pool", "/"):
            assert got[(host, path)] == (403, "host_not_allowed"), (host, path)
    for (host, path), answer in got.items():
        if "evil" not in host:
            assert answer == (200, None), (host, path, answer)


def test_host_name_reads_the_header_forms():
    assert host_name("Example.ORG:8765") == "example.org"
    assert host_name("[::1]:8765") == "::1" and host_name("::1") == "::1"
    assert host_name("localhost.") == "localhost" and host_name("10.0.0.1") == "10.0.0.1"


def test_cors_follows_allow_origin_on_the_http_routes():
    allowed = "https://my.app"
    guard = RequestGuard(ServerSettings(api_key=STRONG, allow_origins=(allowed,)), own_names=OWN)
    bearer = {"Authorization": f"Bearer {STRONG}"}

    async def client(session, base, _port):
        got = {}
        preflight = {"Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"}
        async with session.options(base + "/v1/chat/completions",
                                   headers={"Origin": allowed, **preflight}) as r:
            got["preflight"] = (r.status, dict(r.headers))
        async with session.options(base + "/v1/chat/completions",
                                   headers={"Origin": "https://evil.example", **preflight}) as r:
            got["evil preflight"] = (r.status, dict(r.headers))
        async with session.post(base + "/v1/chat/completions",
                                headers={"Origin": allowed, **bearer}) as r:
            await r.read()
            got["streamed"] = (r.status, dict(r.headers))
        async with session.get(base + "/v1/pool", headers={"Origin": allowed, **bearer}) as r:
            got["json"] = (r.status, dict(r.headers))
        async with session.get(base + "/v1/pool", headers={"Origin": allowed}) as r:
            got["no key"] = (r.status, dict(r.headers))  # the page can read why
        async with session.get(base + "/v1/pool", headers=bearer) as r:
            got["no origin"] = (r.status, dict(r.headers))
        return got

    got = serve(guard, client)
    status, headers = got["preflight"]
    assert status == 204 and headers["Access-Control-Allow-Origin"] == allowed
    assert {"authorization", "content-type"} <= {
        h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert "POST" in headers["Access-Control-Allow-Methods"] and "Origin" in headers["Vary"]
    status, headers = got["evil preflight"]
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    for case in ("streamed", "json"):
        status, headers = got[case]
        assert status == 200 and headers["Access-Control-Allow-Origin"] == allowed, case
    status, headers = got["no key"]
    assert status == 401 and headers["Access-Control-Allow-Origin"] == allowed
    assert "Access-Control-Allow-Origin" not in got["no origin"][1]


# ---------------------------------------------------------------------- session limits
def test_session_limits_end_an_idle_session_and_a_long_one():
    clock = FakeClock()
    limits = SessionLimits(idle_timeout_s=60, max_session_s=300, clock=clock)
    clock.t += 59
    assert limits.ended() is None and limits.next_check_s(5) == 1
    limits.active()
    clock.t += 59
    assert limits.ended() is None  # activity started the idle time again
    clock.t += 1
    end = limits.ended()
    assert end is not None and end.code == "session_idle_timeout" and "1 minute" in end.message
    for _ in range(5):  # active all along: only the length ends it
        clock.t += 50
        limits.active()
    end = limits.ended()
    assert end is not None and end.code == "session_expired"
    assert end.message.startswith("Your session hit the maximum duration of 5 minutes")
    unlimited = SessionLimits(0, 0, clock=clock)
    clock.t += 1e6
    assert unlimited.ended() is None


def test_an_idle_session_is_not_closed_while_its_reply_plays_and_replies_are_not_activity():
    clock = FakeClock()
    limits = SessionLimits(idle_timeout_s=60, max_session_s=0, clock=clock)
    clock.t += 30
    limits.replying()  # replies (the assistant prompting again and again) keep nobody there
    clock.t += 30
    assert limits.ended(playing=True) is None
    end = limits.ended(playing=False)
    assert end is not None and end.code == "session_idle_timeout"


def test_the_clients_idle_timeout_prompts_after_the_reply_has_played():
    clock = FakeClock()
    limits = SessionLimits(idle_timeout_s=0, max_session_s=0, clock=clock)
    assert not limits.nudge_due(None, playing=False)
    clock.t += 4.9
    assert not limits.nudge_due(5000, playing=False)
    limits.replying()  # the user's turn is answered
    clock.t += 10
    assert not limits.nudge_due(5000, playing=False)  # a reply under way
    limits.finished()
    assert not limits.nudge_due(5000, playing=True)  # still playing
    clock.t += 4.9
    assert not limits.nudge_due(5000, playing=False)  # the quiet counts from the reply's end
    clock.t += 0.1
    assert limits.nudge_due(5000, playing=False)
    clock.t += 60
    assert not limits.nudge_due(5000, playing=False)  # the prompt's own reply is under way
    limits.finished()
    clock.t += 2
    limits.active()  # the user speaks: the quiet starts again
    clock.t += 4.9
    assert not limits.nudge_due(5000, playing=False)
    clock.t += 0.1
    assert limits.nudge_due(5000, playing=False)


def _detection(**fields) -> dict:
    return {"audio": {"input": {"turn_detection": {"type": "server_vad", **fields}}}}


def test_session_update_reads_idle_timeout_ms():
    from engine.config import EngineConfig
    from engine.server.session_update import Capabilities, IdleTimeout, session_change

    base, caps = EngineConfig(), Capabilities()
    assert session_change(_detection(idle_timeout_ms=6000), base, caps).idle_timeout == IdleTimeout(6000)
    assert session_change(_detection(), base, caps).idle_timeout == IdleTimeout(None)
    assert session_change({"instructions": "hi"}, base, caps).idle_timeout is None  # untouched
    manual = session_change({"audio": {"input": {"turn_detection": None}}}, base, caps)
    assert manual.idle_timeout == IdleTimeout(None)
    beta = session_change({"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}},
                          base, caps)
    assert beta.idle_timeout == IdleTimeout(5000)
    for bad in (10, "5000", 5000.5, 10**8):
        change = session_change(_detection(idle_timeout_ms=bad), base, caps)
        assert [e.param for e in change.errors] == [
            "session.audio.input.turn_detection.idle_timeout_ms"], bad
    semantic = session_change({"audio": {"input": {"turn_detection": {
        "type": "semantic_vad", "idle_timeout_ms": 5000}}}}, base, caps)
    assert semantic.idle_timeout == IdleTimeout(None)
    assert any("idle_timeout_ms" in line for line in semantic.ignored)
