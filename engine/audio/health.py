"""Health of the sound devices: invalid samples, a device gone quiet, a lost stream.

Nothing here runs in an audio callback. The microphone checks its blocks where they are
read (the VAD's thread), before resampling, so a NaN never reaches the resampler's filter
or the VAD; the speaker checks its stream where audio is queued or asked about. Each
device keeps a ``HealthLog``: its state, and one ``HealthReport`` per change of state
(never one per block). The VAD stage collects the reports of its source and sink
(``poll_health``) and emits them as ``AudioStatus`` events.

A lost stream is released (PortAudio may hang on a stream whose server died, so that
runs on a short-lived thread and is waited for at most ``RELEASE_TIMEOUT_S``), and a
``Reopener`` thread tries to open the device again every ``RETRY_S`` seconds until it
works or the device is closed (which joins it).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("parley.audio.health")

INVALID_LIMIT = 4.0  # |sample| beyond this is not audio (full scale is 1.0): a driver fault
STALL_S = 2.0  # an open device that delivers (or takes) nothing this long is reported
RETRY_S = 1.0  # how often a lost device is reopened
RECOVERED_AFTER_S = 1.0  # valid audio this long ends an episode of invalid samples
RELEASE_TIMEOUT_S = 1.0  # the longest a failed stream's release is waited for
LIFECYCLE_WAIT_S = 5.0  # the longest a stream change waits for another to finish
_KEEP_REPORTS = 32  # reports nobody collected: the oldest are dropped beyond this


class DeviceState(enum.StrEnum):
    OK = "ok"
    INVALID = "invalid"
    STALLED = "stalled"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """One change of a device's state, with the sentence the user reads."""

    device: str  # "microphone" or "speaker"
    state: DeviceState
    message: str


class HealthLog:
    """A device's state and the reports not yet collected. Thread-safe."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._state = DeviceState.OK
        self._message = ""
        self._pending: list[HealthReport] = []

    @property
    def state(self) -> DeviceState:
        return self._state

    @property
    def message(self) -> str:
        """The sentence of the latest report ("" before any)."""
        return self._message

    def set(self, state: DeviceState, message: str) -> bool:
        """Enter ``state``; a report is queued only when the state changes. True if it did."""
        with self._lock:
            if state is self._state:
                return False
            self._state, self._message = state, message
            self._pending.append(HealthReport(self.device, state, message))
            del self._pending[:-_KEEP_REPORTS]
        log.log(logging.INFO if state is DeviceState.OK else logging.WARNING, "%s", message)
        return True

    def drain(self) -> list[HealthReport]:
        """The reports since the last call, oldest first."""
        with self._lock:
            pending, self._pending = self._pending, []
        return pending


def count_invalid(samples: np.ndarray) -> int:
    """How many samples are NaN, infinite or beyond ±``INVALID_LIMIT``. One pass over a
    clean block (its peak); counting only when there is something to count."""
    if samples.size == 0:
        return 0
    peak = float(np.max(np.abs(samples)))
    if peak <= INVALID_LIMIT:  # False for NaN, so NaN is counted below
        return 0
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero(~(np.abs(samples) <= INVALID_LIMIT)))


class SampleGuard:
    """Replaces a block holding invalid samples by silence of its length, and reports
    once per episode; ``RECOVERED_AFTER_S`` of valid audio ends the episode."""

    def __init__(self, log_: HealthLog, name: Callable[[], str]) -> None:
        self.log = log_
        self._name = name
        self._episode = False
        self._clean_s = 0.0
        self.replaced_blocks = 0  # blocks replaced by silence, over the guard's life

    def check(self, samples: np.ndarray, rate: int) -> np.ndarray:
        """``samples`` if valid, else zeros of the same length (and dtype)."""
        bad = count_invalid(samples)
        if bad:
            self.replaced_blocks += 1
            self._clean_s = 0.0
            if not self._episode:
                self._episode = True
                self.log.set(DeviceState.INVALID,
                             f"{self._name()} delivers invalid samples ({bad} of {samples.size} "
                             f"in one block are NaN, infinite or beyond ±{INVALID_LIMIT:g}); they are "
                             "replaced by silence until it delivers valid audio again")
            return np.zeros_like(samples)
        if self._episode:
            self._clean_s += samples.size / rate
            if self._clean_s >= RECOVERED_AFTER_S:
                self._episode = False
                if self.log.state is DeviceState.INVALID:
                    self.log.set(DeviceState.OK, f"{self._name()} delivers valid audio again")
        return samples

    def reset(self) -> None:
        """Forget the episode (a reopened device starts afresh)."""
        self._episode = False
        self._clean_s = 0.0


# ---------------------------------------------------------------------- PortAudio streams
class _Streams:
    """The PortAudio streams this process's devices hold, to know when re-scanning the
    devices is safe (never while one is open, or one that PortAudio failed to release).

    ``lock`` is held around every change of a stream's life (open and start, stop, abort
    and close) and the device re-scan, so one happens at a time in the process: PortAudio's
    JACK host API makes each of them wait on one condition variable shared by all streams,
    with no check of what woke it, so a wake meant for one stream's stop can end another
    stream's close early, which then frees a stream JACK's thread still runs (a segfault
    seen in CI when a device closed while another opened)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.count_lock = threading.Lock()  # for the counts: never held across PortAudio
        self.open = 0
        self.stuck = 0

    def can_refresh(self) -> bool:
        return self.open == 0 and self.stuck == 0

    @contextmanager
    def changing(self, what: str) -> Iterator[bool]:
        """Hold ``lock`` while a stream of ``what`` changes; yields False (and logs) when
        it could not be had within ``LIFECYCLE_WAIT_S``, which only a release PortAudio
        never finished (a dead sound server) causes: the caller goes on unserialised rather
        than hang the pipeline behind it."""
        held = self.lock.acquire(timeout=LIFECYCLE_WAIT_S)
        if not held:
            log.warning("another PortAudio stream change has not finished in %g s (a stuck "
                        "release); the %s stream changes without waiting for it",
                        LIFECYCLE_WAIT_S, what)
        try:
            yield held
        finally:
            if held:
                self.lock.release()


STREAMS = _Streams()


def stream_opened() -> None:
    with STREAMS.count_lock:
        STREAMS.open += 1


def stream_closed() -> None:
    with STREAMS.count_lock:
        STREAMS.open = max(0, STREAMS.open - 1)


def release_stream(stream, what: str) -> bool:
    """Abort and close a failed ``stream``; True once released. Runs on a short-lived
    thread waited for at most ``RELEASE_TIMEOUT_S``: PortAudio can block for good on a
    stream whose sound server died (JACK), and that must not stop the pipeline."""
    done = threading.Event()

    def release() -> None:
        try:
            with STREAMS.changing(what):
                stream.abort()
                stream.close()
        except Exception:  # a dead device's stream may refuse politely too (logged)
            log.info("releasing the lost %s stream failed", what, exc_info=True)
        finally:
            done.set()

    thread = threading.Thread(target=release, name=f"parley-{what}-release", daemon=True)
    thread.start()
    if done.wait(RELEASE_TIMEOUT_S):
        thread.join()
        return True
    with STREAMS.count_lock:
        STREAMS.stuck += 1
    log.warning("PortAudio did not release the lost %s stream within %g s; sound devices are "
                "not re-scanned in this process any more", what, RELEASE_TIMEOUT_S)
    return False


class Reopener:
    """Calls ``attempt()`` every ``interval`` seconds on its own thread until it returns
    True or ``stop`` is called. ``attempt`` raising counts as a failed attempt (logged)."""

    def __init__(self, name: str, attempt: Callable[[], bool], interval: float = RETRY_S) -> None:
        self._attempt = attempt
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.attempts = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop retrying and join the thread; True if it ended."""
        self._stop.set()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.attempts += 1
            try:
                if self._attempt():
                    return
            except Exception:  # a retry that fails in an unexpected way still retries (logged)
                log.exception("reopening a sound device failed")
