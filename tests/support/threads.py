"""Waiting for a condition, and the threads a test leaves behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

WAIT_S = 10.0


def wait_for(condition: Callable[[], bool], timeout: float = WAIT_S, poll: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def parley_threads() -> list[str]:
    """Names of live threads Parley started (stages, sinks, device reopeners)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("parley"))


#: Library threads that start once per process and stay (tqdm's monitor): not leaks.
_PROCESS_THREADS = ("tqdm_monitor",)


def thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()
            if t.is_alive() and not t.name.startswith(_PROCESS_THREADS)}


def new_threads(before: set[str], wait_s: float = 5.0) -> set[str]:
    """The threads running now that were not running at ``before``, after up to ``wait_s``
    for short-lived ones to end."""
    deadline = time.monotonic() + wait_s
    while True:
        extra = thread_names() - before
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.05)


class HeldGate:
    """Another unit's call holding a compute gate (``engine.runtime.compute_gate``) from
    construction until ``end()``: what a stage's call waits behind."""

    def __init__(self, gate, unit: int = 99) -> None:
        self._release = threading.Event()
        entered = threading.Event()

        def hold() -> None:
            with gate.hold(unit=unit):
                entered.set()
                self._release.wait(WAIT_S)

        self._thread = threading.Thread(target=hold, name="test-gate-holder")
        self._thread.start()
        assert entered.wait(WAIT_S), "the gate was not free"

    def end(self) -> None:
        self._release.set()
        self._thread.join(WAIT_S)
