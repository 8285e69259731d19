"""Timers and reminders the assistant sets: kept in a JSON file so they survive a restart,
and a clock thread that fires each one when it is due.

``TimerBook`` is the list (thread-safe; every change rewrites the file whole, through a
temporary file, so a crash leaves the old or the new list, never half of one).
``TimerClock`` is the thread (``parley-timers``): it sleeps until the next due time or a
change, then hands each due timer to its callback (a ``TimerDue`` event and a chime) and
drops it from the book. A timer already overdue when the clock starts fires at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.runtime.paths import data_dir

log = logging.getLogger("parley.tools.timers")

TIMERS_FILE = "timers.json"
KINDS = ("timer", "reminder")
#: The longest a timer may run (a year): a date further out is a mistake, not a plan.
MAX_SECONDS = 366 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Timer:
    """A timer or reminder: ``due_at`` in ``time.time()`` seconds; ``kind`` "timer" or
    "reminder"; ``label`` what it is for (may be empty for a timer)."""

    timer_id: str
    label: str
    due_at: float
    kind: str = "timer"


def timers_path() -> Path:
    """Where the timers are kept: ``timers.json`` in the data folder."""
    return data_dir() / TIMERS_FILE


class TimerBook:
    """The timers, kept in ``path`` (read on first use). Any thread may call it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or timers_path()
        self._lock = threading.Lock()
        self._timers: dict[str, Timer] | None = None
        self._changed: list[Callable[[], None]] = []
        self.load_error: str | None = None  # why the file could not be read, if it could not

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every change (the clock re-reads the next due time)."""
        self._changed.append(callback)

    def _loaded(self) -> dict[str, Timer]:
        if self._timers is None:
            self._timers = self._read()
        return self._timers

    def _read(self) -> dict[str, Timer]:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self.load_error = f"cannot read the timers file {self.path}: {exc}"
            log.warning(self.load_error)
            return {}
        try:
            rows = json.loads(text)
            timers = [Timer(str(r["timer_id"]), str(r.get("label", "")), float(r["due_at"]),
                            str(r.get("kind", "timer"))) for r in rows]
        except (ValueError, TypeError, KeyError) as exc:
            self.load_error = f"the timers file {self.path} is not a list of timers ({exc}); it is ignored"
            log.warning(self.load_error)
            return {}
        return {t.timer_id: t for t in timers if t.kind in KINDS}

    def _write(self) -> None:
        """The list to its file (called under the lock)."""
        rows = [asdict(t) for t in sorted(self._loaded().values(), key=lambda t: t.due_at)]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(rows, indent=1), "utf-8")
        partial.replace(self.path)

    def _notify(self) -> None:
        for callback in self._changed:
            callback()

    def timers(self) -> tuple[Timer, ...]:
        """Every pending timer, soonest first."""
        with self._lock:
            return tuple(sorted(self._loaded().values(), key=lambda t: t.due_at))

    def add(self, seconds: float, label: str, kind: str = "timer") -> Timer:
        """A new timer due in ``seconds`` (``ValueError`` outside 0 < seconds <= a year)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if not 0 < seconds <= MAX_SECONDS:
            raise ValueError(f"the time must be more than 0 s and at most a year, not {seconds:g} s")
        timer = Timer(uuid.uuid4().hex[:8], label.strip()[:200], time.time() + seconds, kind)
        with self._lock:
            self._loaded()[timer.timer_id] = timer
            self._write()
        self._notify()
        return timer

    def cancel(self, timer_id: str) -> Timer | None:
        """Remove a timer; the one removed, or None when there is no such timer."""
        with self._lock:
            timer = self._loaded().pop(timer_id, None)
            if timer is not None:
                self._write()
        if timer is not None:
            self._notify()
        return timer

    def take_due(self, now: float) -> tuple[list[Timer], float | None]:
        """The timers due by ``now`` (removed from the book), and the next due time."""
        with self._lock:
            timers = self._loaded()
            due = sorted((t for t in timers.values() if t.due_at <= now), key=lambda t: t.due_at)
            for timer in due:
                del timers[timer.timer_id]
            if due:
                self._write()
            later = min((t.due_at for t in timers.values()), default=None)
        return due, later


class TimerClock:
    """The thread that fires due timers: ``fire(timer)`` runs on it, once per timer."""

    def __init__(self, book: TimerBook, fire: Callable[[Timer], None]) -> None:
        self._book = book
        self._fire = fire
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        book.on_change(self._wake.set)

    def start(self) -> None:
        """Start the thread (once; again after ``stop``)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="parley-timers", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop and join the thread; True when it ended."""
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._stop.set()
        self._wake.set()
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            due, later = self._book.take_due(time.time())
            for timer in due:
                try:
                    self._fire(timer)
                except Exception:  # one failed notice must not stop the clock (logged)
                    log.exception("firing timer %s failed", timer.timer_id)
            wait = None if later is None else max(0.0, later - time.time())
            self._wake.wait(wait)


def chime(sample_rate: int = 24000) -> np.ndarray:
    """A short two-note chime (E6 then A5, 0.6 s, soft attack and decay), float32 mono."""
    notes = []
    for freq, seconds in ((1318.5, 0.25), (880.0, 0.35)):
        t = np.arange(int(sample_rate * seconds)) / sample_rate
        envelope = np.minimum(1.0, t / 0.01) * np.exp(-t * 7.0)
        notes.append(0.3 * envelope * np.sin(2 * np.pi * freq * t))
    return np.concatenate(notes).astype(np.float32)
