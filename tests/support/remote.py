"""Real OpenAI-compatible servers on loopback for the remote-stage tests, and a small
fault-injecting proxy in front of them.

- ``MlxServer``: ``python -m mlx_lm.server`` serving a model folder (the SmolLM2 copy
  Parley converts), started, killed and restarted on one port.
- ``FaultProxy``: an aiohttp reverse proxy on its own thread and event loop. It forwards
  every request to a real server and, when told to, refuses a key (401), answers a status
  (429, 503) instead of the server, waits before forwarding (a timeout), or cuts a
  streamed answer after some events or bytes (optionally killing the server right then:
  a server stopped mid-reply). It counts the requests it saw and the clients that left
  before their answer was complete (a barge-in closing its stream).

Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.support.loopback import LoopbackServer
from tests.support.processes import end_process
from tests.support.server import free_port


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None,
              headers: dict | None = None) -> dict:
    """GET ``url`` until it answers 200 with JSON (or ``proc`` dies, or time runs out)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode} before answering {url}")
        try:
            request = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(request, timeout=2) as response:
                body = json.loads(response.read() or b"null")
                if isinstance(body, dict):
                    return body
        except Exception as exc:  # noqa: BLE001 - not up yet: try again
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout:.0f} s: {last}")


class MlxServer:
    """``mlx_lm.server`` serving ``folder`` on 127.0.0.1:``port``."""

    def __init__(self, folder: Path, workdir: Path, port: int | None = None) -> None:
        self.folder = Path(folder).resolve()
        self.port = port or free_port()
        self.workdir = workdir
        (workdir / "hub").mkdir(parents=True, exist_ok=True)  # its /v1/models scans the cache
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        """The id the server lists (and answers to): the folder's resolved path."""
        return str(self.folder)

    def start(self, timeout: float = 120.0) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(self.workdir / "hub"),
               "PYTHONUNBUFFERED": "1"}
        self.starts += 1
        log = open(self.workdir / f"mlx-server-{self.starts}.log", "w")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlx_lm.server", "--model", str(self.folder),
                 "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        wait_http(f"{self.url}/models", timeout, self.proc)

    def kill(self) -> None:
        """SIGKILL: the server stops at once, mid-reply or not."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        path = self.workdir / f"mlx-server-{self.starts}.log"
        return path.read_text(errors="replace") if path.exists() else ""


class FaultProxy(LoopbackServer):
    """A reverse proxy to ``upstream`` (``http://127.0.0.1:P``) that injects failures."""

    name = "fault proxy"

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.require_key: str | None = None  # answer 401 unless this Bearer key is sent
        self.fail: list[int] = []  # answer these statuses (one per request) before forwarding
        self.delay_s = 0.0  # wait this long before forwarding
        self.cut_after_events: int | None = None  # close after forwarding N SSE data events
        self.cut_after_bytes: int | None = None  # close after forwarding N body bytes
        self.on_cut: Callable[[], None] | None = None  # e.g. kill the server: it stopped mid-reply
        self.paths = ("/v1/chat/completions", "/v1/audio/speech", "/v1/audio/transcriptions")
        self.requests: list[str] = []  # every request's path, in order
        self.auth_seen: list[str] = []  # the Authorization headers received
        self.client_gone = 0  # answers the client stopped reading before they were complete
        self.cuts = 0
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        self.require_key, self.fail, self.delay_s = None, [], 0.0
        self.cut_after_events = self.cut_after_bytes = self.on_cut = None

    def count(self, path: str) -> int:
        return sum(p == path for p in self.requests)

    # ------------------------------------------------------------------ the server
    def routes(self, app) -> None:
        app.router.add_route("*", "/{tail:.*}", self._handle)

    def app_options(self) -> dict:
        return {"client_max_size": 64 * 1024 * 1024}

    async def opened(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def closing(self) -> None:
        await self._session.close()

    async def _handle(self, request):
        from aiohttp import web

        path = request.path
        self.requests.append(path)
        self.auth_seen.append(request.headers.get("Authorization", ""))
        if self.require_key is not None and \
                request.headers.get("Authorization") != f"Bearer {self.require_key}":
            return web.json_response({"error": {"message": "invalid api key",
                                                "type": "invalid_request_error"}}, status=401)
        if self.fail and path in self.paths:
            status = self.fail.pop(0)
            headers = {"Retry-After": "0"} if status == 429 else None
            return web.json_response({"error": {"message": f"injected {status}"}}, status=status,
                                     headers=headers)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
            if request.transport is None or request.transport.is_closing():
                self.client_gone += 1
                return web.Response(status=499)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length", "transfer-encoding",
                                        "connection", "accept-encoding")}
        async with self._session.request(request.method, self.upstream + request.path_qs,
                                         data=body, headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items()
                if k.lower() in ("content-type", "retry-after", "server")})
            response.enable_chunked_encoding()
            await response.prepare(request)
            events = sent = 0
            try:
                async for data in upstream.content.iter_any():
                    await response.write(data)
                    events += data.count(b"data: {")
                    sent += len(data)
                    if (path in self.paths and upstream.status == 200
                            and ((self.cut_after_events is not None and events >= self.cut_after_events)
                                 or (self.cut_after_bytes is not None and sent >= self.cut_after_bytes))):
                        self.cuts += 1
                        if self.on_cut is not None:
                            self.on_cut()  # quick (a SIGKILL): no executor thread to leak
                        request.transport.abort()  # no end of the chunked body: a cut
                        return response
            except (ConnectionError, RuntimeError):  # the client went away mid-answer
                self.client_gone += 1
                return response
            except Exception:  # noqa: BLE001 - the upstream died mid-answer: cut the client too
                if request.transport is not None:
                    request.transport.abort()
                return response
            await response.write_eof()
            return response
