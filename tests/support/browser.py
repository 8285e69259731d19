"""Headless Chromium driven over the DevTools protocol, for the web page's tests: no
driver and no browser download, the system's ``chromium`` and a WebSocket
(``websockets``' sync client, a dev dependency already).

``find_chromium()`` says where the browser is, or why a test cannot run: the tests skip
then, except where ``PARLEY_REQUIRE_BROWSER=1`` (CI) makes a missing browser a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.processes import end_process

REQUIRE_ENV = "PARLEY_REQUIRE_BROWSER"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The path of a Chromium on PATH, or None."""
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def browser_required() -> bool:
    """True where a missing browser must fail the tests (CI sets it)."""
    return os.environ.get(REQUIRE_ENV, "") == "1"


class PageError(AssertionError):
    """A script on the page threw, or a wait ran out; says what the page showed."""


class Chromium:
    """One headless Chromium; ``open(url)`` gives a ``Page``. ``wav`` is the fake
    microphone (played once with ``loop=False``); ``spki`` trusts a certificate by the
    base64 SHA-256 of its public key. ``allow_microphone=False`` leaves out the fake
    permission prompt that says yes to every page (``Browser.setPermission`` decides)."""

    def __init__(self, wav: Path, *, loop: bool = True, spki: str | None = None,
                 executable: str | None = None, allow_microphone: bool = True) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="parley-chromium-"))
        capture = f"{wav}{'' if loop else '%noloop'}"
        args = [executable or find_chromium() or "chromium", "--headless=new", "--no-sandbox",
                "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-background-networking", "--disable-extensions",
                *(["--use-fake-ui-for-media-stream"] if allow_microphone else []),
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={capture}",
                "--autoplay-policy=no-user-gesture-required",
                # No sound device is needed: the fake output pulls audio at real time. A
                # container's small /dev/shm would crash the renderer.
                "--disable-audio-output", "--disable-dev-shm-usage",
                "--disable-renderer-backgrounding", "--disable-background-timer-throttling",
                f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
                "--window-size=1280,900"]
        if spki:
            args.append(f"--ignore-certificate-errors-spki-list={spki}")
        self.proc = subprocess.Popen([*args, "about:blank"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = self._port(30.0)

    def _port(self, timeout: float) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before it started")
            if marker.is_file() and (lines := marker.read_text().split()):
                return int(lines[0])
            time.sleep(0.1)
        self.close()
        raise RuntimeError("chromium did not open its DevTools port in time")

    def open(self, url: str, width: int = 1280, height: int = 900, dark: bool = False) -> Page:
        """A new tab at ``url``, ``width`` x ``height`` CSS pixels, light or dark."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank",
                                         method="PUT")
        with urllib.request.urlopen(request, timeout=10) as answer:
            target = json.loads(answer.read())
        page = Page(target["webSocketDebuggerUrl"], target["id"], self.port)
        page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)
        page.call("Emulation.setEmulatedMedia", features=[
            {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}])
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        page.wait("document.readyState === 'complete' && !!window.parley", 30)
        return page

    def close(self) -> None:
        """Ends the browser and removes its profile. Idempotent."""
        end_process(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab: ``evaluate`` a JavaScript expression, ``wait`` until one is true."""

    def __init__(self, ws_url: str, target_id: str, port: int) -> None:
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=None, open_timeout=10, proxy=None)
        self._id = 0
        self._target = target_id
        self._port = port

    def call(self, method: str, **params) -> dict:
        """One DevTools command; its result (events in between are dropped)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=30))
            if message.get("id") == self._id:
                if "error" in message:
                    raise PageError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        """The value of ``expression`` (awaited if a promise), as JSON."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise PageError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self, element_id: str) -> str:
        return self.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent")

    def wait(self, expression: str, timeout: float, what: str = "") -> object:
        """Polls ``expression`` until it is truthy; PageError with the page's state if
        ``timeout`` runs out."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except PageError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise PageError(f"waited {timeout:g} s for {what or expression}; the page shows: "
                                f"{self.summary()}")
            time.sleep(0.2)

    def summary(self) -> str:
        """The state, message, conversation and counters, for a failure's message."""
        try:
            return json.dumps(self.evaluate(
                "({state: document.getElementById('state')?.textContent,"
                " message: document.getElementById('message')?.textContent,"
                " transcript: document.getElementById('transcript')?.innerText,"
                " stats: window.parley?.stats})"))
        except Exception as exc:  # noqa: BLE001 - a summary must not hide the first failure
            return f"(no summary: {exc})"

    def screenshot(self, path: Path) -> None:
        """A PNG of the whole page."""
        import base64

        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            urllib.request.urlopen(f"http://127.0.0.1:{self._port}/json/close/{self._target}",
                                   timeout=10).close()
