"""The GUI's background lanes (app.core.background): order, latest wins, the widget-gone
check, typed failures, progress, and threads joined on shutdown."""

from __future__ import annotations

import logging
import threading

import pytest
import shiboken6
from PySide6.QtCore import QObject

from app.core.background import (Command, Failure, Job, JobKind, LatestLane, Outcome, SerialLane, emit_safely,
                                 shutdown_all)
from app.core.polling import PollingLane
from engine.errors import ConfigError, ParleyError

WAIT_MS = 5000


def _gate_job(started: threading.Event, release: threading.Event, value=None):
    """Work that says it started, then waits to be released; returns ``value``."""
    def work(task):
        started.set()
        release.wait(5)
        return value
    return work


def test_a_serial_lane_runs_in_order_there_and_commits_here(qtbot):
    lane = SerialLane()
    ran, committed = [], []
    started, release = threading.Event(), threading.Event()

    def work(n):
        def run(_task):
            if n == 0:
                started.set()
                release.wait(5)
            ran.append((n, threading.current_thread().name))
            return n
        return run

    def commit(value):
        committed.append((value, threading.current_thread() is threading.main_thread()))

    for n in range(3):
        lane.submit(Job(JobKind.START, work(n), commit))
    assert started.wait(5)
    assert lane.current is JobKind.START and lane.busy and lane.running
    release.set()
    qtbot.waitUntil(lambda: len(committed) == 3, timeout=WAIT_MS)
    assert ran == [(0, "parley-gui-worker"), (1, "parley-gui-worker"), (2, "parley-gui-worker")]
    assert committed == [(0, True), (1, True), (2, True)]  # in order, on the GUI thread
    assert lane.current is None and not lane.busy
    assert lane.shutdown(2.0)
    assert "parley-gui-worker" not in {t.name for t in threading.enumerate()}


def test_latest_wins_drops_what_a_newer_request_superseded(qtbot):
    lane = LatestLane(name="test-latest")
    started, release = threading.Event(), threading.Event()
    committed, ran = [], []
    first = lane.submit(Job(JobKind.PROBE, _gate_job(started, release, "first"), committed.append))
    assert started.wait(5)

    def later(name):
        def run(_task):
            ran.append(name)
            return name
        return run

    second = lane.submit(Job(JobKind.PROBE, later("second"), committed.append))
    third = lane.submit(Job(JobKind.PROBE, later("third"), committed.append))
    assert first.cancelled and first.dropped  # the running request is told to stop
    assert second.dropped and not third.dropped
    release.set()
    qtbot.waitUntil(lambda: committed == ["third"], timeout=WAIT_MS)
    qtbot.wait(50)  # the first one's (dropped) outcome has come and gone too
    assert committed == ["third"]
    assert ran == ["third"]  # the superseded waiting request never ran
    assert not lane.busy
    assert lane.shutdown(2.0)


def test_a_gone_widget_is_not_an_error(qtbot, caplog):
    owner = QObject()
    lane = LatestLane(owner, "test-gone")
    started, release = threading.Event(), threading.Event()
    committed, reported = [], []

    class Slow(Command):
        what = JobKind.SCAN

        def work(self, task):
            started.set()
            release.wait(5)
            reported.append(task.report("late progress"))
            return "late"

        def commit(self, outcome):
            committed.append(outcome)

    task = lane.submit(Slow())
    assert started.wait(5)
    shiboken6.delete(owner)  # the dialog closed; its lane went with it
    assert not shiboken6.isValid(lane)
    with caplog.at_level(logging.WARNING):
        release.set()
        assert lane.join(5)
        qtbot.wait(50)
    assert reported == [False] and task.cancelled  # nobody listens: the work is told to stop
    assert committed == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_emit_safely_says_whether_anyone_can_listen(qapp):
    from PySide6.QtCore import Signal

    class Source(QObject):
        said = Signal(str)

    source, heard = Source(), []
    source.said.connect(heard.append)
    assert emit_safely(source.said, "hello") and heard == ["hello"]
    shiboken6.delete(source)
    assert emit_safely(source.said, "again") is False


def test_a_failure_carries_the_error_itself(qtbot):
    lane = SerialLane()
    failures: list[Failure] = []
    wrong = ConfigError("stt.beam_size must be at least 1")

    def bad_config(_task):
        raise wrong

    lane.submit(Job(JobKind.APPLY, bad_config, failed=failures.append))
    lane.call(JobKind.LOAD, lambda: 1 / 0, failed=failures.append)
    qtbot.waitUntil(lambda: len(failures) == 2, timeout=WAIT_MS)
    typed, unexpected = failures
    assert typed.error is wrong and typed.parley_error is wrong and isinstance(typed.error, ParleyError)
    assert typed.message == str(typed) == "stt.beam_size must be at least 1"
    assert isinstance(unexpected.error, ZeroDivisionError) and unexpected.parley_error is None
    assert unexpected.message.startswith("unexpected error while loading models: ZeroDivisionError")
    assert lane.shutdown(2.0)


def test_progress_arrives_here_before_the_outcome(qtbot):
    lane = SerialLane()
    seen = []

    class Counting(Command):
        what = JobKind.DOWNLOAD

        def work(self, task):
            for n in range(3):
                assert task.report(n)
            return "done"

        def progress(self, n):
            seen.append((n, threading.current_thread() is threading.main_thread()))

        def commit(self, outcome: Outcome):
            seen.append((outcome.value, outcome.ok))

    lane.submit(Counting())
    qtbot.waitUntil(lambda: len(seen) == 4, timeout=WAIT_MS)
    assert seen == [(0, True), (1, True), (2, True), ("done", True)]
    assert lane.shutdown(2.0)


def test_shutdown_drops_what_waits_and_joins_the_thread(qtbot):
    lane = SerialLane(name="test-shutdown")
    started, release = threading.Event(), threading.Event()
    ran, committed = [], []
    lane.submit(Job(JobKind.STOP, _gate_job(started, release, "running"), committed.append))
    lane.call(JobKind.STOP, lambda: ran.append("waiting"))
    assert started.wait(5)
    assert not lane.shutdown(0.05)  # the running job is not cut short
    release.set()
    assert lane.join(5)
    assert not any(t.is_alive() for t in lane._threads)
    qtbot.waitUntil(lambda: committed == ["running"], timeout=WAIT_MS)  # what ran is committed
    assert ran == []  # what waited never ran
    late = lane.call(JobKind.STOP, lambda: ran.append("late"))
    assert late.dropped
    qtbot.wait(50)
    assert ran == []


def test_a_latest_lane_shutdown_cancels_the_running_request(qtbot):
    lane = LatestLane(name="test-cancel")
    started, committed, saw_cancel = threading.Event(), [], []

    def work(task):
        started.set()
        saw_cancel.append(task.stop_event.wait(5))
        return "cut short"

    lane.submit(Job(JobKind.PLAY, work, committed.append))
    assert started.wait(5)
    assert lane.shutdown(5)
    qtbot.wait(50)
    assert saw_cancel == [True] and committed == []


def test_shutdown_all_joins_the_lanes_of_one_window_only(qtbot):
    window, other = QObject(), QObject()
    child = QObject(window)
    mine, theirs = LatestLane(child, "test-mine"), LatestLane(other, "test-theirs")
    started, release = threading.Event(), threading.Event()
    for lane in (mine, theirs):
        lane.call(JobKind.SCAN, lambda: release.wait(5) or started.set())
    assert shutdown_all(0.05, under=window) == ["test-mine"]  # still running: named
    release.set()
    assert shutdown_all(5, under=window) == []
    assert not mine.running
    late = theirs.call(JobKind.SCAN, lambda: "still open")
    assert not late.dropped  # the other window's lane still takes work
    assert theirs.shutdown(5)


def test_a_polling_lane_drops_readings_of_a_source_no_longer_watched():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Reading:
        t: float
        source: str

    read_from, go_on = threading.Event(), threading.Event()

    def read(source):
        if source == "old":
            read_from.set()
            go_on.wait(5)  # the source is replaced while this reading is taken
        return Reading(1.0, source)

    poller = PollingLane(read, "test reading", 0.01, "test-poller")
    poller.watch("old")
    assert read_from.wait(5)
    poller.watch("new")
    go_on.set()
    deadline = threading.Event()
    for _ in range(200):
        if poller.latest() is not None:
            break
        deadline.wait(0.01)
    assert poller.latest() == Reading(1.0, "new")
    assert poller.shutdown(2.0) and not poller.running


@pytest.mark.parametrize("lane_class", [SerialLane, LatestLane])
def test_a_lane_has_no_thread_while_idle(qtbot, lane_class):
    lane = lane_class()
    done = []
    lane.call(JobKind.DISCOVER, lambda: "x", done.append)
    qtbot.waitUntil(lambda: done == ["x"], timeout=WAIT_MS)
    assert lane.join(2.0)  # the thread ended with the work: nothing idles
    assert not lane.running
