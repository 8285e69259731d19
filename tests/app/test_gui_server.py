"""The Server tab: serving the realtime API from the app, on the desktop engine's models.

The slow test loads the real offline models (Silero VAD, faster-whisper tiny.en,
SmolLM2-135M via transformers, Piper) into the desktop engine, starts serving two
pipelines from the Server tab, connects two WebSocket clients (one types a turn), and
checks the live tables, that no model was loaded a second time, that the desktop
conversation still answers a recording while serving, and that Stop closes every client
and joins every thread. It writes ``server_panel.png`` (see tests/app/test_gui_e2e.py for
where screenshots go). The fast tests need no model.

The clients run on their own asyncio loop in a background thread, so the Qt event loop
keeps running while they talk; the test waits on what the panel's tables show.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtWidgets import QApplication, QLineEdit

from app.window.main_window import MainWindow
from app.server.controller import ServerState
from app.server.panel import MODEL_COLUMNS, UNIT_COLUMNS
from app.core.theme import load_stylesheet
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.bench.server_process import free_port
from engine.config import STAGES, EngineConfig


ROOT = Path(__file__).resolve().parents[2]
OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "off", "llm.max_new_tokens": 24}
API_KEY = "test-key-not-a-secret-7d1f"


def screenshots_dir(tmp_path: Path) -> Path:
    """``PARLEY_SCREENSHOTS_DIR`` when set (relative to the repository root), else ``tmp_path``."""
    chosen = os.environ.get("PARLEY_SCREENSHOTS_DIR")
    return ROOT / chosen if chosen else tmp_path / "screenshots"


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def rows(table) -> list[list[str]]:
    """Every cell's text, row by row."""
    return [[table.item(r, c).text() if table.item(r, c) else "" for c in range(table.columnCount())]
            for r in range(table.rowCount())]


def by_column(table, columns: tuple[str, ...]) -> list[dict[str, str]]:
    return [dict(zip(columns, row)) for row in rows(table)]


class Clients:
    """WebSocket clients of ``/v1/realtime`` on an asyncio loop in a background thread.

    Client 0 types one turn once its session is created; every client then stays
    connected, reading events, until the server closes it (or ``close`` is called).
    """

    def __init__(self, url: str, count: int, key: str | None = None, prompt: str = "Say hello.") -> None:
        self.url, self.count, self.key, self.prompt = url, count, key, prompt
        self.events: list[list[str]] = [[] for _ in range(count)]
        self.local: list[str | None] = [None] * count  # "127.0.0.1:port", as the server sees it
        self.close_codes: list[int | None] = [None] * count
        self.errors: list[str] = []
        self.turn_done = threading.Event()
        self.connected = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="test-realtime-clients", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Disconnect whatever is still connected; join the thread."""
        if self.thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        opened: list[asyncio.Event] = [asyncio.Event() for _ in range(self.count)]
        tasks = []
        for i in range(self.count):  # one after the other: a deterministic unit order
            tasks.append(asyncio.create_task(self._client(i, opened[i])))
            await asyncio.wait({asyncio.create_task(opened[i].wait()), tasks[-1]},
                               return_when=asyncio.FIRST_COMPLETED)
        self.connected.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, i: int, opened: asyncio.Event) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, WebSocketException

        headers = {"Authorization": f"Bearer {self.key}"} if self.key else None
        try:
            async with connect(self.url, additional_headers=headers, max_size=None) as ws:
                host, port = ws.local_address[:2]
                self.local[i] = f"{host}:{port}"
                stopper = asyncio.create_task(self._stop.wait())
                reader = asyncio.create_task(self._read(i, ws, opened))
                await asyncio.wait({stopper, reader}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if not reader.done():
                    await ws.close()
                try:
                    await reader
                except ConnectionClosed:
                    pass
            self.close_codes[i] = ws.close_code
        except (OSError, TimeoutError, WebSocketException) as exc:  # reported by the test
            self.errors.append(f"client {i}: {type(exc).__name__}: {exc}")
            opened.set()

    async def _read(self, i: int, ws, opened: asyncio.Event) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in ws:
                event = json.loads(raw)
                kind = event.get("type", "?")
                self.events[i].append(kind)
                if kind == "session.created":
                    opened.set()
                    if i == 0:
                        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                            "type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": self.prompt}]}}))
                        await ws.send(json.dumps({"type": "response.create"}))
                elif kind == "response.done":
                    self.turn_done.set()
                elif kind == "error":
                    self.errors.append(f"client {i}: {event.get('error')}")
        except ConnectionClosed:
            pass


@pytest.fixture
def window(qtbot, gui_settings):
    QApplication.instance().setStyleSheet(load_stylesheet())
    config = EngineConfig().with_overrides(OFFLINE)
    w = MainWindow(config, gui_settings, autoload=False)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitUntil(lambda: not w.controller.worker.busy, timeout=120_000)  # device discovery
    yield w
    w.close()


def test_the_form_its_defaults_and_its_saved_settings(qtbot, gui_settings):
    gui_settings.setValue("ui/server_host", "localhost")
    gui_settings.setValue("ui/server_port", 9123)
    gui_settings.setValue("ui/server_pipelines", 3)
    gui_settings.setValue("ui/server_origins", "http://localhost:3000, https://example.org")
    w = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(w)
    p = w.server_panel
    assert w.tabs.tabText(w.tabs.indexOf(w.pages["Server"])) == "Server"
    assert (p.host.text(), p.port.value(), p.pipelines.value()) == ("localhost", 9123, 3)
    assert p.request().allow_origins == ("http://localhost:3000", "https://example.org")
    assert (p.pipelines.minimum(), p.pipelines.maximum()) == (1, 16)
    assert p.api_key.echoMode() is QLineEdit.EchoMode.Password and p.api_key.text() == ""
    assert "non-loopback" in p.api_key.toolTip()
    for widget in (p.host, p.port, p.pipelines, p.api_key, p.origins, p.start_button,
                   p.units_table, p.models_table):
        assert widget.accessibleName(), widget.objectName()
    # Tab order: the form, left to right and top to bottom, then Start, then the tables.
    chain, widget = [], p.host
    for _ in range(7):
        widget = widget.nextInFocusChain()
        while not widget.focusPolicy() or widget not in (p.port, p.pipelines, p.api_key, p.origins,
                                                          p.start_button, p.units_table,
                                                          p.models_table):
            widget = widget.nextInFocusChain()
        chain.append(widget)
    assert chain == [p.port, p.pipelines, p.api_key, p.origins, p.start_button, p.units_table,
                     p.models_table]
    assert p.start_button.text() == "Start serving" and p.status.text() == "Not serving."
    qtbot.waitUntil(lambda: not w.controller.worker.busy, timeout=120_000)
    w.close()


def test_a_port_in_use_is_an_error_in_the_status_line(window, qtbot):
    p, server = window.server_panel, window.server_panel.server
    window.tabs.setCurrentWidget(window.pages["Server"])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p.port.setValue(port)
        with qtbot.waitSignal(server.start_failed, timeout=30_000):
            p.start_button.click()
    assert server.state is ServerState.STOPPED
    assert f"cannot listen on 127.0.0.1 port {port}" in p.status.text()
    assert p.status.property("level") == "error"
    assert p.start_button.isEnabled() and p.start_button.text() == "Start serving"
    assert p.port.isEnabled() and p.host.isEnabled()
    assert window.controller.registry.load_count() == 0  # it failed before loading anything
    assert _threads("parley-server") == [] and _threads("parley-u") == []
    assert window.settings.value("ui/server_port") is None  # saved only once serving

    # Another machine may reach 0.0.0.0: no start without a key.
    p.host.setText("0.0.0.0")
    p.start_button.click()
    assert server.state is ServerState.STOPPED
    assert "API key" in p.status.text() and p.status.property("level") == "error"
    assert p.start_button.isEnabled()


@pytest.mark.slow
def test_serving_two_clients_beside_the_desktop_conversation(window, qtbot, tmp_path, jfk_path):
    c, p, server = window.controller, window.server_panel, window.server_panel.server
    registry = c.registry

    # The desktop conversation's engine holds the models first.
    with qtbot.waitSignal(c.engine_changed, timeout=600_000):
        c.apply(c.config)
    loads = {s: registry.load_count(s) for s in STAGES}
    assert loads == {s: 1 for s in STAGES}

    # Start serving two pipelines on a free port, with a key, from the Server tab.
    window.tabs.setCurrentWidget(window.pages["Server"])
    port = free_port()
    p.port.setValue(port)
    p.pipelines.setValue(2)
    p.api_key.setText(API_KEY)
    p.start_button.click()
    assert p.start_button.text() == "Starting…" and not p.port.isEnabled()
    qtbot.waitUntil(lambda: server.state is ServerState.SERVING, timeout=120_000)
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    assert p.status.text().startswith(f"Serving on {url} · 2 pipelines")
    assert "every model shared with the conversation" in p.status.text()
    assert p.start_button.text() == "Stop serving" and p.start_button.isEnabled()
    # Not one model loaded again: the server's engine shares the desktop engine's.
    assert {s: registry.load_count(s) for s in STAGES} == loads and server.models_loaded == 0
    assert all(server.engine.models[s] is c.engine.models[s] for s in STAGES)
    assert int(window.settings.value("ui/server_port")) == port
    window.settings.sync()
    assert API_KEY not in Path(window.settings.fileName()).read_text(encoding="utf-8")

    # Two clients; the first types a turn.
    clients = Clients(url, 2, key=API_KEY)
    clients.start()
    try:
        assert clients.connected.wait(30), clients.errors
        assert clients.turn_done.wait(300), (clients.errors, clients.events)
        assert all(clients.local), clients.errors

        def units_show_both() -> bool:
            units = {u["Client"]: u for u in by_column(p.units_table, UNIT_COLUMNS)}
            first = units.get(clients.local[0])
            return (len(units) == 2 and set(units) == set(clients.local)
                    and all(u["State"] == "busy" for u in units.values())
                    and first["Turns"] == "1" and first["Last voice-to-voice"].endswith(" ms"))

        qtbot.waitUntil(units_show_both, timeout=30_000)
        units = {u["Client"]: u for u in by_column(p.units_table, UNIT_COLUMNS)}
        assert units[clients.local[1]]["Turns"] == "0"
        assert sorted(u["Unit"] for u in units.values()) == ["1", "2"]  # the desktop's is 0
        assert p.units_hint.text().startswith("2 of 2 units busy")
        models = by_column(p.models_table, MODEL_COLUMNS)
        assert [m["Stage"] for m in models] == list(STAGES)
        assert all(m["Device"].startswith("cpu") for m in models), models
        backends = {m["Stage"]: m["Backend"] for m in models}
        assert (backends["stt"], backends["llm"], backends["tts"]) == \
            ("faster-whisper", "transformers", "piper")
        assert "session.created" in clients.events[0] and "response.done" in clients.events[0]
        assert clients.events[1][:1] == ["session.created"]
        assert not clients.errors, clients.errors

        shot = screenshots_dir(tmp_path)
        shot.mkdir(parents=True, exist_ok=True)
        qtbot.wait(300)  # a poll and a redraw
        image = window.grab()
        assert (image.width(), image.height()) == (1280, 800)
        path = shot / "server_panel.png"
        assert image.save(str(path))
        assert path.stat().st_size > 20_000
        print(f"\nscreenshot: {path}")

        # The desktop conversation keeps working while serving: a recording, answered.
        window.tabs.setCurrentWidget(window.pages["Conversation"])
        trailing = (c.config.vad.min_silence_ms + c.config.turns.reopen_grace_ms) / 1000 + 0.5
        states: list[str] = []
        c.state_changed.connect(states.append)
        c.start_with([FileSource(jfk_path, realtime=False, trailing_silence_s=trailing)],
                     [FileSink(None, realtime=False)])
        qtbot.waitUntil(lambda: "listening" in states and c.state == "ready", timeout=300_000)
        replies = [reply for _t, _u, reply in window.conversation.turns() if reply]
        assert replies and len(replies[0].split()) >= 2
        assert server.state is ServerState.SERVING
        assert {s: registry.load_count(s) for s in STAGES} == loads

        # Stop: every client is closed, every unit and the server thread joined.
        window.tabs.setCurrentWidget(window.pages["Server"])
        p.start_button.click()
        qtbot.waitUntil(lambda: server.state is ServerState.STOPPED, timeout=30_000)
        clients.thread.join(15)
        assert not clients.thread.is_alive()
        assert clients.close_codes == [1001, 1001], clients.close_codes  # going away
    finally:
        clients.close()
    assert p.status.text() == "Not serving." and p.start_button.text() == "Start serving"
    assert p.units_table.rowCount() == 0 and p.models_table.rowCount() == 0
    assert _threads("parley-u") == [] and _threads("parley-server") == []
    assert server.engine is None
    # The desktop engine still holds its models; the server's references are gone.
    assert all(m.refs == 1 for m in registry.loaded()) and len(registry.loaded()) == 4
    window.close()
    assert window.shutdown_stuck == [] and not server.poller.running


# ---------------------------------------------------------------------- TLS
def test_the_tls_options_of_the_form(qtbot, gui_settings):
    gui_settings.setValue("ui/server_tls_self_signed", True)
    gui_settings.setValue("ui/server_tls_cert", "/etc/parley/cert.pem")
    w = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(w)
    p = w.server_panel
    for widget in (p.tls_self_signed, p.tls_cert, p.tls_key, p.tls_info):
        assert widget.accessibleName(), widget.objectName()
    assert p.tls_self_signed.isChecked() and not p.tls_cert.isEnabled() and not p.tls_key.isEnabled()
    request = p.request()
    assert request.tls_self_signed and (request.tls_cert, request.tls_key) == (None, None)
    p.tls_self_signed.setChecked(False)
    assert p.tls_cert.isEnabled() and p.tls_key.isEnabled()
    p.tls_key.setText(" /etc/parley/key.pem ")
    request = p.request()
    assert not request.tls_self_signed
    assert (request.tls_cert, request.tls_key) == ("/etc/parley/cert.pem", "/etc/parley/key.pem")
    assert not p.tls_info.isVisible()
    qtbot.waitUntil(lambda: not w.controller.worker.busy, timeout=120_000)
    w.close()


def test_a_bad_tls_file_is_an_error_before_anything_loads(window, qtbot, tmp_path):
    p, server = window.server_panel, window.server_panel.server
    window.tabs.setCurrentWidget(window.pages["Server"])
    p.port.setValue(free_port())
    p.tls_cert.setText(str(tmp_path / "cert.pem"))
    p.start_button.click()  # a certificate without its key: refused at once
    assert server.state is ServerState.STOPPED
    assert "--tls-cert needs --tls-key too" in p.status.text()
    p.tls_key.setText(str(tmp_path / "key.pem"))
    with qtbot.waitSignal(server.start_failed, timeout=30_000):
        p.start_button.click()
    assert f"TLS certificate {tmp_path / 'cert.pem'} (--tls-cert): no such file" in p.status.text()
    assert p.status.property("level") == "error" and server.state is ServerState.STOPPED
    assert window.controller.registry.load_count() == 0  # it failed before loading anything
    assert window.settings.value("ui/server_tls_cert") is None  # saved only once serving


@pytest.mark.slow
def test_serving_over_tls_with_a_self_signed_certificate(window, qtbot):
    import ssl
    import urllib.request

    from engine.server.tls import fingerprint

    p, server = window.server_panel, window.server_panel.server
    window.tabs.setCurrentWidget(window.pages["Server"])
    port = free_port()
    p.port.setValue(port)
    p.tls_self_signed.setChecked(True)
    p.start_button.click()
    qtbot.waitUntil(lambda: server.state is ServerState.SERVING, timeout=300_000)
    assert p.status.text().startswith(f"Serving on wss://127.0.0.1:{port}/v1/realtime · 1 pipeline")
    tls = server.tls
    assert tls is not None and tls.ca_file is not None and tls.ca_file.is_file()
    assert tls.fingerprint == fingerprint(tls.cert_file.read_bytes())
    assert p.tls_info.isVisible()
    assert p.tls_info.text() == (f"TLS certificate SHA-256 {tls.fingerprint} · clients verify it "
                                 f"with the CA file {tls.ca_file}")
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/v1/pool", timeout=10, context=context) as r:
        assert r.status == 200 and json.loads(r.read())["num_pipelines"] == 1
    assert window.settings.value("ui/server_tls_self_signed") in (True, "true")
    p.start_button.click()
    qtbot.waitUntil(lambda: server.state is ServerState.STOPPED, timeout=30_000)
    assert not p.tls_info.isVisible() and server.tls is None
