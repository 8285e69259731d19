"""The user's tools run in a worker process (``multiprocessing``, spawn): a function that
hangs cannot be stopped in a thread, but its process can be killed. On a timeout the
worker is killed and the next call starts a fresh one (the module is loaded again).

The engine's side is ``UserToolWorker``; the process runs ``serve``: it loads the
module, answers ``("ready", tools)`` or ``("error", message)``, then each
``("call", name, arguments_json)`` with ``("ok", result_text)`` or
``("raised", message)``. Only one call is in flight (the tool worker thread is one).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import threading
import time
from typing import Any

from engine.tools.user_module import ToolModuleError, UserTool, load_user_module

log = logging.getLogger("parley.tools.worker")

#: How long a fresh worker may take to import the user's module.
LOAD_TIMEOUT_S = 30.0


class ToolTimeout(Exception):
    """The call ran past its time; the worker was killed."""


class ToolRaised(Exception):
    """The tool raised; the message is its exception's type and text."""


def result_text(value: Any) -> str:
    """A tool's return value as the text the model is given (JSON unless it is text)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def serve(conn, spec: str) -> None:
    """The worker process's main loop (its target)."""
    try:
        tools, functions = load_user_module(spec)
    except ToolModuleError as exc:
        conn.send(("error", str(exc)))
        return
    except BaseException as exc:  # noqa: BLE001 - anything the module did is the user's fault to read
        conn.send(("error", f"tools.user_module: loading {spec} raised {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", tools))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "call":
            return
        _, name, arguments = message
        try:
            value = functions[name](**json.loads(arguments or "{}"))
            conn.send(("ok", result_text(value)))
        except BaseException as exc:  # noqa: BLE001 - the model is told what the tool raised
            conn.send(("raised", f"{type(exc).__name__}: {exc}"))


class UserToolWorker:
    """The worker process for the module ``spec``. ``start`` loads it (a ToolModuleError
    names a bad module); ``call`` runs one tool with a timeout. Thread-safe."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.tools: tuple[UserTool, ...] = ()
        self._lock = threading.Lock()
        self._halted = threading.Event()
        self._process: Any = None
        self._conn: Any = None

    def start(self) -> tuple[UserTool, ...]:
        """Start the process and load the module (blocks up to ``LOAD_TIMEOUT_S``)."""
        with self._lock:
            self._start()
            return self.tools

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=serve, args=(child, self.spec), name="parley-user-tools",
                                  daemon=True)
        process.start()
        child.close()
        if not parent.poll(LOAD_TIMEOUT_S):
            _kill(process)
            raise ToolModuleError(f"tools.user_module: loading {self.spec} took more than "
                                  f"{LOAD_TIMEOUT_S:g} s; its top-level code must not wait")
        try:
            kind, payload = parent.recv()
        except (EOFError, OSError):
            _kill(process)
            raise ToolModuleError(f"tools.user_module: the worker loading {self.spec} ended "
                                  f"(exit code {process.exitcode})") from None
        if kind != "ready":
            _kill(process)
            raise ToolModuleError(payload)
        self._process, self._conn, self.tools = process, parent, tuple(payload)

    def call(self, name: str, arguments: str, timeout: float) -> str:
        """Run tool ``name`` with ``arguments`` (JSON text); its result as text. Raises
        ToolTimeout (the worker is killed) or ToolRaised (the tool's exception, or the
        worker ended: it crashed, or ``abort`` stopped it)."""
        with self._lock:
            if self._halted.is_set():
                raise ToolRaised(f"{name} was not run: the engine is stopping")
            if self._process is None or not self._process.is_alive():
                self._start()
            deadline = time.monotonic() + timeout
            try:
                self._conn.send(("call", name, arguments))
                # In slices, so that ``abort`` (another thread) ends the wait at once.
                while not self._conn.poll(min(0.1, max(0.0, deadline - time.monotonic()))):
                    if self._halted.is_set():
                        self._stop()
                        raise ToolRaised(f"{name} was stopped: the engine is stopping")
                    if time.monotonic() >= deadline:
                        self._stop()
                        raise ToolTimeout(f"{name} took more than {timeout:g} s and was stopped")
                kind, payload = self._conn.recv()
            except (EOFError, OSError):  # crashed, or killed by ``abort``
                code = self._process.exitcode if self._process is not None else None
                self._stop()
                raise ToolRaised(f"the worker process running {name} ended (exit code {code})") from None
        if kind == "ok":
            return payload
        raise ToolRaised(payload)

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            _kill(self._process)
        self._process = self._conn = None

    def abort(self) -> None:
        """From any thread: a call in flight ends at once with ToolRaised (the engine is
        stopping), and later calls too until ``resume``."""
        self._halted.set()

    def resume(self) -> None:
        """Calls run again (the engine started again)."""
        self._halted.clear()

    def close(self) -> None:
        """Kill the process (it holds no state worth a graceful end) and reap it."""
        with self._lock:
            self._stop()


def _kill(process) -> None:
    process.kill()
    process.join(5.0)
