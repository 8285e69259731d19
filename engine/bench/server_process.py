"""A ``parley-cli serve`` child process for the benchmarks: started, sampled, stopped.

``engine.bench.serve`` measures servers started here; ``free_port`` and ``process_rss``
are what it and the tests use to place and weigh them, ``server_figures`` what the soak
through the server (``engine.bench.server_soak``) watches for leaks.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from engine.bench.clients import BenchRunError

#: The line ``parley-cli serve`` prints once it listens.
SERVING = re.compile(r"serving on (ws://\S+)")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the system's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def process_rss(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, in bytes."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        raise BenchRunError(f"the server (pid {pid}) is gone") from None
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            if proc is root:
                raise BenchRunError(f"the server (pid {pid}) is gone") from None
    return total


@dataclass(frozen=True)
class ServerFigures:
    """A server process at one moment: the RSS of it and its children, and its own
    threads and open file descriptors (handles on Windows)."""

    rss: int
    threads: int
    fds: int

    def as_dict(self) -> dict:
        return {"rss_bytes": self.rss, "threads": self.threads, "fds": self.fds}


def server_figures(pid: int) -> ServerFigures:
    """``ServerFigures`` of ``pid`` now; a BenchRunError once it is gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if hasattr(proc, "num_fds"):
            fds = proc.num_fds()
        else:  # Windows (psutil's type stubs are those of the platform they are read on)
            fds = proc.num_handles()  # pyright: ignore[reportAttributeAccessIssue]
        threads = proc.num_threads()
    except psutil.NoSuchProcess:
        raise BenchRunError(f"the server (pid {pid}) is gone") from None
    return ServerFigures(process_rss(pid), threads, fds)


class ServerProcess:
    """One ``parley-cli serve`` child: started, sampled, stopped.

    Its stdout and stderr go to one pipe that a thread reads line by line: the last lines
    are kept for error messages, and shown as they come with ``verbose``.
    """

    def __init__(self, units: int, port: int, extra_args: list[str], verbose: bool = False,
                 command: list[str] | None = None) -> None:
        self.units = units
        self.port = port
        self.command = command or [sys.executable, "-m", "engine.cli", "serve", "--host", "127.0.0.1",
                                   "--port", str(port), "--num-pipelines", str(units), *extra_args]
        self.verbose = verbose
        self.url: str | None = None
        self.proc: subprocess.Popen | None = None
        self._tail: deque[str] = deque(maxlen=30)
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        """The process id, once ``start`` ran."""
        if self.proc is None:
            raise BenchRunError(f"the server with {self.units} unit(s) was not started")
        return self.proc.pid

    @property
    def pool_url(self) -> str:
        return re.sub(r"^ws", "http", self.url or "").replace("/v1/realtime", "/v1/pool")

    @property
    def ws_url(self) -> str:
        """The WebSocket URL it serves on, known once ``start`` returned."""
        if self.url is None:
            raise BenchRunError(f"the server with {self.units} unit(s) is not serving yet")
        return self.url

    def tail(self) -> str:
        return "\n".join(f"  | {line}" for line in self._tail) or "  (no output)"

    def _read(self) -> None:
        if self.proc is None or self.proc.stdout is None:
            return  # started by start(), once the process and its pipe exist
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self._tail.append(line)
            if self.verbose:
                print(f"[serve {self.units}] {line}", file=sys.stderr, flush=True)
            match = SERVING.search(line)
            if match and self.url is None:
                self.url = match.group(1)
                self._ready.set()

    def start(self, timeout: float) -> str:
        """Start it and wait for its ``serving on`` line; returns the WebSocket URL."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = proc = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, errors="replace", env=env, start_new_session=True)
        except OSError as exc:
            raise BenchRunError(f"cannot start {' '.join(self.command[:4])}: {exc}") from None
        self._reader = threading.Thread(target=self._read, name=f"serve-{self.units}-output", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.2):
            if proc.poll() is not None:
                self._reader.join(2.0)
                raise BenchRunError(f"the server with {self.units} unit(s) exited with status "
                                    f"{proc.returncode} before it served; its last output:\n"
                                    f"{self.tail()}")
            if time.monotonic() > deadline:
                raise BenchRunError(f"the server with {self.units} unit(s) did not say 'serving on' "
                                    f"within {timeout:.0f} s; its last output:\n{self.tail()}")
        return self.ws_url

    def rss(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            raise BenchRunError(f"the server with {self.units} unit(s) has exited; its last output:\n"
                                f"{self.tail()}")
        return process_rss(self.proc.pid)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGINT (as Ctrl-C would), then terminate, then kill; waits for it."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        steps = [(lambda: proc.send_signal(signal.SIGINT)) if os.name == "posix" else None,
                 proc.terminate, proc.kill]
        for step, wait in zip(steps, (timeout, 5.0, 5.0)):
            if step is None:
                continue
            try:
                step()
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        if self._reader is not None:
            self._reader.join(2.0)
