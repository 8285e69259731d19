"""Helpers for the realtime server's tests: ports, audio as the Realtime API sends it,
raw WebSocket clients, and ``parley-cli serve`` as a subprocess. (An offline engine is
the ``server_engine`` fixture of tests/server/conftest.py.)"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

from engine.bench.server_process import free_port as free_port  # the tests place servers with it
from tests.support.paths import ROOT
from tests.support.processes import end_process


def to_pcm16_24k(audio: np.ndarray, rate: int) -> bytes:
    """float audio at ``rate`` -> PCM16 little-endian at 24 kHz, as a client sends it."""
    import soxr

    resampled = soxr.resample(audio.astype(np.float32), rate, 24000) if rate != 24000 else audio
    return (np.clip(resampled, -1, 1) * 32767).round().astype("<i2").tobytes()


def pcm16_to_float(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def append_event(pcm: bytes) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": b64(pcm)})


def text_item(text: str) -> dict:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": text}]}}


#: NO_PROXY for clients that take a proxy from the environment (``websockets``): loopback
#: must bypass it (the ``loopback_without_proxy`` fixture of tests/server/conftest.py).
LOOPBACK = "127.0.0.1,localhost"


def get_pool(port: int) -> dict:
    """``GET /v1/pool`` of the keyless server on ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/pool", timeout=10) as response:
        return json.loads(response.read())


async def pool_when(port: int, check, timeout: float = 15.0) -> dict:
    """Poll ``GET /v1/pool`` until ``check(pool)``: units are released after a client left."""
    deadline = time.monotonic() + timeout
    while True:
        pool = await asyncio.to_thread(get_pool, port)
        if check(pool):
            return pool
        assert time.monotonic() < deadline, pool
        await asyncio.sleep(0.1)


def wait_free(server, timeout: float = 15.0) -> None:
    """Wait until every unit of ``server`` (a ``ServerThread``) is free again."""
    deadline = time.monotonic() + timeout
    while any(u["state"] != "free" for u in server.pool_status()["units"]):
        assert time.monotonic() < deadline, server.pool_status()
        time.sleep(0.05)


async def recv_json(ws, timeout: float = 30.0) -> dict:
    """The next event of a raw ``websockets`` connection, decoded."""
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def recv_until(ws, kind: str, timeout: float = 60.0) -> tuple[dict, list[dict]]:
    """Receive until an event of type ``kind``; returns it and every event seen before."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while True:
        event = await recv_json(ws, max(0.1, deadline - time.monotonic()))
        if event["type"] == kind:
            return event, seen
        seen.append(event)



class ServeProcess:
    """``parley-cli serve`` in a subprocess; stderr is read by a thread and kept."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if k != "PARLEY_API_KEY"}
        full_env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})})
        self.proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", *args],
                                     cwd=ROOT, env=full_env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="serve-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("serving on "):
                self._ready.set()
        self._ready.set()  # the process ended: stop waiting

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout: float) -> None:
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError(f"parley-cli serve did not start:\n{self.stderr}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit status. Idempotent."""
        end_process(self.proc, timeout)
        self._reader.join(10)
        self.proc.stderr.close()
        return self.proc.returncode
