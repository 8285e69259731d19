"""The GUI's one way to run work off its thread: lanes that run commands and hand back outcomes.

Work that can block (engine calls, probes, scans, downloads, device tests, playback) is
a ``Command``: its ``work`` runs on a lane's thread and returns a value; its ``commit``
runs on the GUI thread afterwards and receives an ``Outcome``, the value or the
``Failure`` (the exception itself and its words for people). Work never writes GUI
state; only ``commit`` does, on the GUI thread, through a queued signal that never makes
the GUI thread wait.

- ``SerialLane``: commands run one at a time, in order (an Apply queued behind a load
  never races it); every outcome is committed.
- ``LatestLane``: the latest request wins. A new command supersedes the one waiting
  (which never runs) and the one running (its task is cancelled, its outcome dropped):
  a probe of a URL being edited, a cache scan, a search, a sound that replaces another.
- ``PollingLane`` (``app.core.polling``): one thread that keeps the latest reading of a
  watched source (the engine's snapshot, the server's pool), read by the GUI's timer.

A lane owns the two checks every background result needs: the outcome of a superseded
request is dropped (the generation check), and an outcome whose receiver is gone is
dropped without an error (the widget-gone check: a lane is a child QObject of its owner
and is deleted with it; emitting from its thread then raises RuntimeError, which is
caught here and nowhere else in the app). A lane's thread starts with its first command
and ends once nothing waits; ``shutdown`` joins it, and ``shutdown_all`` joins every lane
still alive when the app closes.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal, SignalInstance

from engine.errors import ParleyError

log = logging.getLogger("parley.app.background")

T = TypeVar("T")


class JobKind(enum.StrEnum):
    """What background work does; the value words it for messages ("while loading models")."""

    DISCOVER = "discovering devices"
    LOAD = "loading models"
    APPLY = "applying settings"
    SWITCH_ENGINE = "switching to the new engine"
    START = "starting the pipeline"
    STOP = "stopping the pipeline"
    SWITCH_INPUT = "switching the input device"
    SWITCH_OUTPUT = "switching the output device"
    NEW_CONVERSATION = "starting a new conversation"
    SAY = "sending a typed message"
    VOICES = "listing the voices"
    PREVIEW = "previewing the voice"
    PLAY = "playing a sound"
    PROBE = "probing the remote servers"
    SCAN = "scanning the model caches"
    REMOVE = "removing a model"
    DOWNLOAD = "downloading models"
    TEST_MICROPHONE = "testing the microphone"
    TEST_SPEAKER = "testing the speaker"
    SEARCH = "searching the history"
    CHECK_COMPUTER = "checking this computer"


# ---------------------------------------------------------------------- outcomes
@dataclass(frozen=True, slots=True)
class Failure:
    """Why a command's work did not return: the exception itself, and what the work was."""

    error: BaseException
    what: str

    @property
    def message(self) -> str:
        """A ParleyError's own words; any other exception as an unexpected error naming the work."""
        if isinstance(self.error, ParleyError):
            return str(self.error)
        return f"unexpected error while {self.what}: {type(self.error).__name__}: {self.error}"

    @property
    def parley_error(self) -> ParleyError | None:
        """The ParleyError, so a front end can act on it (a ModelLoadError: offer another device)."""
        return self.error if isinstance(self.error, ParleyError) else None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """What a command's work came to: its ``value``, or its ``failure``."""

    value: T | None = None
    failure: Failure | None = None

    @property
    def ok(self) -> bool:
        """True when the work returned."""
        return self.failure is None

    def got(self) -> T:
        """What the work returned, once its failure was handled: a failed outcome raises
        its error again."""
        if self.failure is not None:
            raise self.failure.error
        return cast(T, self.value)


# ---------------------------------------------------------------------- commands
class Task:
    """One submitted command, as its work and its owner see it: whether it should stop,
    and a way to report progress to the GUI thread. ``submit`` returns it."""

    def __init__(self, lane: _Lane, command: Command) -> None:
        self.command = command
        self._lane = lane
        self._stop = threading.Event()
        self._dropped = False  # superseded or shut down: nothing it produces is committed
        self._counted = False  # part of the lane's ``busy`` count

    @property
    def cancelled(self) -> bool:
        """True once the owner cancelled it, a newer request superseded it or nobody listens."""
        return self._stop.is_set()

    @property
    def stop_event(self) -> threading.Event:
        """The cancel flag as an Event, for work that waits on one (a device test)."""
        return self._stop

    @property
    def dropped(self) -> bool:
        """True when its outcome will not be committed (superseded, or the lane shut down)."""
        return self._dropped

    def cancel(self) -> None:
        """Ask the work to stop early; its outcome is still committed (unless dropped)."""
        self._stop.set()

    def report(self, *args: Any) -> bool:
        """Hand ``args`` to the command's ``progress`` on the GUI thread (queued, never
        waits). False, and the task cancelled, once nobody listens any more."""
        if self._lane._post(self, args, True):
            return True
        self._stop.set()
        return False

    def report_load(self, stage: str, fraction: float | None, text: str) -> None:
        """``report`` as the engine's load and apply progress callback (``ProgressFn``)."""
        self.report(stage, fraction, text)


class Command:
    """Work for a lane. ``work`` runs on the lane's thread and must not touch the GUI;
    ``commit`` receives its Outcome on the GUI thread, ``progress`` what it reported."""

    what: str = "working in the background"

    def work(self, task: Task) -> Any:
        """The blocking part, on the lane's thread; returns what ``commit`` receives."""
        raise NotImplementedError

    def commit(self, outcome: Outcome) -> None:
        """On the GUI thread, once ``work`` returned or raised. By default a failure is logged."""
        if outcome.failure is not None:
            log.error("%s failed: %s", self.what, outcome.failure.message)

    def progress(self, *args: Any) -> None:
        """On the GUI thread: what ``work`` passed to ``task.report``."""


class Job(Command):
    """A command of plain functions: ``work(task)`` on the lane's thread, then
    ``done(value)`` or ``failed(failure)`` on the GUI thread (no ``failed``: logged)."""

    def __init__(self, what: str, work: Callable[[Task], Any],
                 done: Callable[[Any], None] | None = None,
                 failed: Callable[[Failure], None] | None = None,
                 progress: Callable[..., None] | None = None) -> None:
        self.what = what
        self._work, self._done, self._failed, self._progress = work, done, failed, progress

    def work(self, task: Task) -> Any:
        return self._work(task)

    def commit(self, outcome: Outcome) -> None:
        if outcome.failure is None:
            if self._done is not None:
                self._done(outcome.value)
        elif self._failed is not None:
            self._failed(outcome.failure)
        else:
            super().commit(outcome)

    def progress(self, *args: Any) -> None:
        if self._progress is not None:
            self._progress(*args)


# ---------------------------------------------------------------------- lanes
_LANES: weakref.WeakSet = weakref.WeakSet()  # every lane and poller, for shutdown_all


def register(lane: Any) -> None:
    """Make ``lane`` (anything with ``name`` and ``shutdown(timeout) -> bool``) known to
    ``shutdown_all``; lanes and pollers register themselves."""
    _LANES.add(lane)


def emit_safely(signal: SignalInstance, *args: Any) -> bool:
    """Emit ``signal`` from any thread; False if its QObject was deleted meanwhile (the
    widget is gone and nobody waits for the news). The app's one widget-gone check."""
    try:
        signal.emit(*args)
    except RuntimeError:  # "Signal source has been deleted"
        return False
    return True


class _Lane(QObject):
    """The machinery shared by both lanes: a queue, a thread while there is work, and
    delivery of outcomes to the GUI thread."""

    _posted = Signal(object, object, bool)  # task, Outcome or progress args, is progress

    def __init__(self, parent: QObject | None = None, name: str = "parley-background") -> None:
        """``parent``: the owner, whose deletion drops what is still on its way; ``name``:
        the thread's name."""
        super().__init__(parent)
        self.name = name
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the running task or the queue changed
        self._waiting: deque[Task] = deque()
        self._running: Task | None = None
        self._taking = False  # a thread takes work from the queue (set and cleared under the lock)
        self._threads: list[threading.Thread] = []  # started; the last may be ending
        self._closed = False
        self._undelivered = 0  # GUI thread only: submitted, not dropped, outcome not committed
        self._posted.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        register(self)

    # ------------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        """True while a command submitted here waits, runs or has its outcome on the way."""
        return self._undelivered > 0

    @property
    def running(self) -> bool:
        """True while a command's work runs or waits on the lane's thread."""
        with self._lock:
            return self._running is not None or bool(self._waiting)

    @property
    def current(self) -> str | None:
        """What the work running now does (a JobKind), if any."""
        task = self._running
        return None if task is None else task.command.what

    # ------------------------------------------------------------------ submitting
    def submit(self, command: Command) -> Task:
        """Run ``command`` on this lane (GUI thread); its ``commit`` follows here. After
        ``shutdown`` nothing runs: the task comes back dropped."""
        task = Task(self, command)
        if self._closed:
            task._dropped = True
            return task
        task._counted = True
        self._undelivered += 1
        thread = None
        with self._lock:
            self._enqueue(task)
            self._changed.notify_all()
            if not self._taking:
                self._taking = True
                thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        if thread is not None:
            thread.start()
        return task

    def call(self, what: str, fn: Callable[[], Any], done: Callable[[Any], None] | None = None,
             failed: Callable[[Failure], None] | None = None) -> Task:
        """Run ``fn()`` here, then ``done(value)`` or ``failed(failure)`` on the GUI thread."""
        return self.submit(Job(what, lambda _task: fn(), done, failed))

    def _enqueue(self, task: Task) -> None:
        self._waiting.append(task)

    def _drop(self, task: Task) -> None:
        """Its outcome will not be committed (GUI thread, under the lock)."""
        task._dropped = True
        task._stop.set()
        if task._counted:
            task._counted = False
            self._undelivered -= 1

    # ------------------------------------------------------------------ closing
    def wait_idle(self, timeout: float) -> bool:
        """Block until no work runs or waits here; True if so within ``timeout`` s. Only
        for the final close: the outcome is committed later, by the event loop."""
        with self._changed:
            return self._changed.wait_for(lambda: self._running is None and not self._waiting, timeout)

    def shutdown(self, timeout: float = 0.0) -> bool:
        """Take no more work and drop what waits; what runs finishes (a LatestLane cancels
        it and drops its outcome). True if the thread ended within ``timeout`` s."""
        self._closed = True
        with self._lock:
            for task in self._waiting:
                self._drop(task)
            self._waiting.clear()
            self._on_shutdown()
            self._changed.notify_all()
        return self.join(timeout)

    def _on_shutdown(self) -> None:
        """Under the lock, after the waiting tasks were dropped."""

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the lane's threads to end; True if none runs."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    # ------------------------------------------------------------------ the thread
    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    self._taking = False  # a submit from now on starts a new thread
                    self._changed.notify_all()
                    return
                task = self._running = self._waiting.popleft()
            outcome = self._execute(task)
            with self._lock:
                self._running = None
                self._changed.notify_all()
            self._post(task, outcome, False)
            # The queued signal holds them now, so they are let go on the GUI thread.
            del task, outcome

    def _execute(self, task: Task) -> Outcome:
        what = task.command.what
        try:
            return Outcome(value=task.command.work(task))
        except ParleyError as exc:
            return Outcome(failure=Failure(exc, what))
        except Exception as exc:  # a bug must reach the user, not end the thread (logged)
            log.exception("background work %r failed", what)
            return Outcome(failure=Failure(exc, what))

    def _post(self, task: Task, payload: Any, is_progress: bool) -> bool:
        return emit_safely(self._posted, task, payload, is_progress)

    def _deliver(self, task: Task, payload: Any, is_progress: bool) -> None:
        """On the GUI thread: progress or the outcome to the command, unless dropped."""
        if is_progress:
            if not task._dropped:
                task.command.progress(*payload)
            return
        if task._counted:
            task._counted = False
            self._undelivered -= 1
        if not task._dropped:
            task.command.commit(payload)


class SerialLane(_Lane):
    """Commands one at a time, in the order submitted; every outcome is committed."""

    def __init__(self, parent: QObject | None = None, name: str = "parley-gui-worker") -> None:
        super().__init__(parent, name)


class LatestLane(_Lane):
    """The latest request wins: submitting supersedes what waits (it never runs) and what
    runs (cancelled; its outcome dropped). One command runs at a time."""

    def __init__(self, parent: QObject | None = None, name: str = "parley-latest") -> None:
        super().__init__(parent, name)

    def _enqueue(self, task: Task) -> None:
        self._supersede()
        self._waiting.append(task)

    def drop(self) -> None:
        """Supersede everything submitted so far (GUI thread): nothing of it is committed."""
        with self._lock:
            self._supersede()
            self._changed.notify_all()

    def _supersede(self) -> None:
        for task in self._waiting:
            self._drop(task)
        self._waiting.clear()
        if self._running is not None:
            self._drop(self._running)

    def _on_shutdown(self) -> None:
        self._supersede()


def shutdown_all(timeout: float = 2.0, under: QObject | None = None) -> list[str]:
    """A window's final close: every lane still alive (of ``under`` and its children,
    else every lane and poller of the app) takes no more work and is joined, ``timeout``
    s in all. Returns the names of threads that did not end."""
    deadline = time.monotonic() + timeout
    lanes = [lane for lane in list(_LANES) if under is None or _is_within(lane, under)]
    for lane in lanes:
        lane.shutdown(0.0)
    return [lane.name for lane in lanes if not lane.shutdown(max(0.0, deadline - time.monotonic()))]


def _is_within(lane: Any, ancestor: QObject) -> bool:
    """True when ``lane`` is a QObject below ``ancestor``, or one whose owner was deleted
    already (nobody else is left to join its thread)."""
    if not isinstance(lane, QObject):
        return False
    if not shiboken6.isValid(lane):
        return True
    node = lane.parent()
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent()
    return False
