"""ServerController: the app's handle on the realtime server (``engine.server``).

Serving needs an Engine of its own, with one pipeline unit per client, but not models of
its own: it is built on the desktop controller's ModelRegistry, so every model the desktop
engine already holds is shared (``registry.load_count()`` does not move), and only what
is missing loads. The desktop conversation keeps running beside it.

Building and loading that engine, starting the server (``ServerThread.start``) and
stopping it all run on this controller's own serial lane (``app.core.background``), never
on the GUI thread, and never queued behind (or ahead of) the desktop engine's commands;
results come back as queued signals. ``pool_status()`` (the server's ``GET /v1/pool``) is
read by a PoolPoller (a polling lane); ``latest()`` hands the GUI its newest copy without
calling the server.

With TLS (the user's certificate and key, or a self-signed one Parley makes and keeps)
the certificate is checked, or made, before any model loads; once serving, ``tls`` holds
its fingerprint and the CA file clients verify it with.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.core.background import Failure, Job, JobKind, SerialLane, Task
from app.core.polling import PollingLane
from engine.config import EngineConfig
from engine.errors import ParleyError
from engine.models.model_registry import ModelRegistry

log = logging.getLogger("parley.app.server")

#: The server's units are numbered from 1 (thread names ``parley-u1-stt``...): the
#: desktop conversation's own unit is 0.
FIRST_UNIT = 1
SERVER_THREAD = "parley-server-loop"  # ServerThread's event loop thread
POOL_POLL_S = 0.2  # pool_status() five times a second; the panel draws the latest at 10 Hz
STOP_TIMEOUT_S = 5.0


class ServerState(enum.StrEnum):
    """Where serving stands; the Start/Stop button and the status line follow it."""

    STOPPED = "stopped"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"


@dataclass(frozen=True, slots=True)
class ServeRequest:
    """What the panel asks for. ``api_key`` is never logged nor stored."""

    host: str = "127.0.0.1"
    port: int = 8765
    pipelines: int = 1
    api_key: str | None = field(default=None, repr=False)
    allow_origins: tuple[str, ...] = ()
    tls_self_signed: bool = False
    tls_cert: str | None = None  # PEM files; both or neither, and not with tls_self_signed
    tls_key: str | None = None
    insecure_plaintext: bool = False  # plain ws:// off loopback, which the user accepted


@dataclass(frozen=True, slots=True)
class PoolView:
    """One ``pool_status()`` reading and when it was taken (``time.perf_counter``)."""

    t: float
    status: dict[str, Any]


class _Serving:
    """What one start built: filled by the start job, read on the GUI thread only after
    that job has returned (its ``done``, or ``shutdown`` after ``wait_idle``)."""

    def __init__(self, request: ServeRequest) -> None:
        self.request = request
        self.engine: Any = None
        self.server: Any = None
        self.loads_before = 0
        self.loads_after = 0

    def close(self, timeout: float = STOP_TIMEOUT_S) -> list[str]:
        """Stop the server (it joins its loop and client units), then the engine; release
        this engine's references on the shared models. Names of threads that did not end."""
        stuck: list[str] = []
        server, engine = self.server, self.engine
        self.server = self.engine = None
        if server is not None:
            try:
                ended = server.stop(timeout)
            except Exception:  # logged: the engine below must still stop
                log.exception("stopping the realtime server failed")
                ended = False
            if not ended:
                stuck.append(SERVER_THREAD)
        if engine is not None:
            stuck += engine.stop(2.0)
            engine.release_models()
        return stuck


def server_settings(request: ServeRequest):
    """The engine's ServerSettings for ``request``, checked: a ParleyError says what is
    wrong (aiohttp missing, a non-loopback host without a key...). Cheap: no I/O."""
    from engine.server import require_aiohttp
    from engine.server.server_settings import ServerSettings

    require_aiohttp()
    settings = ServerSettings(host=request.host, port=request.port,
                              num_pipelines=request.pipelines, api_key=request.api_key,
                              allow_origins=request.allow_origins,
                              tls_self_signed=request.tls_self_signed, tls_cert=request.tls_cert,
                              tls_key=request.tls_key,
                              insecure_plaintext=request.insecure_plaintext)
    settings.check()
    return settings


def check_port_free(host: str, port: int) -> None:
    """ParleyError if ``host``:``port`` cannot be listened on now (in use, no such
    address), worded like the server's own error; it is checked again when the server
    binds. Run before loading models, so a taken port fails in milliseconds."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ParleyError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            if os.name == "posix":  # as asyncio's server sets it: TIME_WAIT is no conflict
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise ParleyError(f"cannot listen on {host} port {port}: "
                                  f"{exc.strerror or exc}") from None


class PoolPoller(PollingLane):
    """The latest ``server.pool_status()`` of the server being served, on its own thread;
    it starts with the first server watched and sleeps while none is."""

    def __init__(self, interval_s: float = POOL_POLL_S, name: str = "parley-pool-poller") -> None:
        super().__init__(lambda server: PoolView(time.perf_counter(), server.pool_status()),
                         "pool_status", interval_s, name)

    @property
    def polls(self) -> int:
        return self.readings


class ServerController(QObject):
    """Starts and stops serving on the shared models; signals every change."""

    state_changed = Signal(object)  # ServerState
    started = Signal(str)  # the server's URL
    start_failed = Signal(str)  # nothing is serving; the message says why
    stopped = Signal(object)  # names of threads that did not end (a list)
    progress = Signal(str, object, str)  # stage, fraction or None, text (the engine's load)

    def __init__(self, config: Callable[[], EngineConfig], registry: ModelRegistry,
                 parent: QObject | None = None) -> None:
        """``config()`` is the desktop's applied EngineConfig at the moment Start is
        pressed; the server's engine runs it with ``units`` = pipelines."""
        super().__init__(parent)
        self._config = config
        self.registry = registry
        self.worker = SerialLane(self)
        self.poller = PoolPoller()
        self.state = ServerState.STOPPED
        self.url: str | None = None
        self.tls: Any = None  # the TlsCertificate served with (engine.server.tls); None without
        self.models_loaded = 0  # models the last start really loaded (the rest were shared)
        self._serving: _Serving | None = None
        self._closing = False

    # ------------------------------------------------------------------ start / stop
    def start(self, request: ServeRequest) -> None:
        """Build and load the server's engine on the shared models, then serve."""
        if self._closing or self.state is not ServerState.STOPPED:
            return
        try:
            settings = server_settings(request)  # a bad host or key fails here, at once
            config = self._config().with_overrides({"units": request.pipelines})
        except ParleyError as exc:
            self.start_failed.emit(str(exc))
            return
        serving = self._serving = _Serving(request)
        registry = self.registry
        self._set_state(ServerState.STARTING)

        def job(task: Task) -> _Serving:
            from engine.engine import Engine
            from engine.server.runner import ServerThread
            from engine.server.tls import resolve_tls

            check_port_free(settings.host, settings.port)  # before minutes of loading
            resolve_tls(settings)  # a bad file fails here too; a self-signed one is made once
            try:
                serving.loads_before = registry.load_count()
                serving.engine = Engine(config, registry=registry)
                serving.engine.load(task.report_load)
                serving.loads_after = registry.load_count()
                server = ServerThread(serving.engine, settings, FIRST_UNIT)
                try:
                    server.start()
                finally:
                    serving.server = server  # closed below if it failed or the window closes
                if self._closing:
                    raise ParleyError("the window closed while the server started")
            except BaseException:
                serving.close(1.0)  # what was built is let go here, on this thread
                raise
            return serving

        def failed(failure: Failure) -> None:
            if serving is self._serving:
                self._serving = None
            self._set_state(ServerState.STOPPED)
            self.start_failed.emit(failure.message)

        self.worker.submit(Job(JobKind.LOAD, job, self._started, failed, progress=self.progress.emit))

    def _started(self, serving: _Serving) -> None:
        if self._closing or serving is not self._serving:
            return
        self.url = serving.server.url
        self.tls = serving.server.tls
        self.models_loaded = serving.loads_after - serving.loads_before
        self.poller.watch(serving.server)
        self._set_state(ServerState.SERVING)
        self.started.emit(self.url)

    def stop(self) -> None:
        """Stop serving: every client is closed, the units and the server thread joined."""
        serving = self._serving
        if serving is None or self.state is not ServerState.SERVING:
            return
        self._set_state(ServerState.STOPPING)
        self.poller.watch(None)

        def done(stuck: list[str]) -> None:
            self._serving = None
            self.url = self.tls = None
            self._set_state(ServerState.STOPPED)
            self.stopped.emit(stuck)

        def failed(failure: Failure) -> None:
            self._serving = None
            self.url = self.tls = None
            self._set_state(ServerState.STOPPED)
            self.stopped.emit([failure.message])

        self.worker.call(JobKind.STOP, serving.close, done, failed)

    # ------------------------------------------------------------------ reading
    def latest(self) -> PoolView | None:
        """The newest ``pool_status()`` reading while serving; never calls the server."""
        return self.poller.latest() if self.state is ServerState.SERVING else None

    @property
    def engine(self):
        """The server's engine while serving (for tests and diagnostics)."""
        serving = self._serving
        return serving.engine if serving is not None and self.state is ServerState.SERVING else None

    # ------------------------------------------------------------------ close
    def shutdown(self, wait_s: float = 10.0) -> list[str]:
        """Final close (the GUI may wait here): stop serving, join every thread.

        A start or stop in flight finishes first; whatever it built is closed here.
        Returns the names of threads that did not end.
        """
        self._closing = True
        self.worker.shutdown(0)
        idle = self.worker.wait_idle(wait_s)
        self.worker.join(1.0)
        stuck: list[str] = []
        if not self.poller.shutdown(2.0):
            stuck.append(self.poller.name)
        serving, self._serving = self._serving, None
        if serving is not None and idle:
            stuck += serving.close()
        elif serving is not None:  # a start still loading: it closes what it built itself
            stuck.append("parley-gui-worker (server start)")
        self.state = ServerState.STOPPED
        return stuck

    def _set_state(self, state: ServerState) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)
