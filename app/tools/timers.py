"""The timers and reminders the assistant set: read off the GUI thread, listed in the
window with the time left and a Cancel button, and a notification when one is due.

``TimerPoller`` (a ``PollingLane``, ``app.core.polling``) reads ``Engine.timers()`` on its
own thread twice a second and keeps the latest list; the window's tick hands it to
``TimersPanel``, which also counts the time left down between readings. A timer that fired
(``TimerDue``) or was cancelled leaves the list at once, before the next reading says so.
The list the engine gives is its persisted store, so after a restart it comes back.
``Notifier`` shows a due timer on the window's banner always, and as a system
notification where the desktop has a tray; the chime is the engine's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QApplication, QGridLayout, QGroupBox, QLabel, QPushButton, QStyle,
                               QSystemTrayIcon, QVBoxLayout, QWidget)

from app.core.polling import PollingLane
from app.core.widgets import clear_layout

if TYPE_CHECKING:
    from engine.tools.timers import Timer

POLL_S = 0.5  # a timer's list changes when the assistant sets one: twice a second is news enough


@dataclass(frozen=True, slots=True)
class TimerReading:
    """One reading of ``Engine.timers()``: ``t`` (perf_counter, for the poller's order)
    and the timers (``engine.tools.Timer``: ``timer_id``, ``label``, ``due_at``, ``kind``)."""

    t: float
    timers: tuple


class TimerPoller(PollingLane):
    """The latest ``engine.timers()`` of the watched engine, about twice a second."""

    def __init__(self, interval_s: float = POLL_S, name: str = "parley-timer-list") -> None:
        super().__init__(lambda engine: TimerReading(time.perf_counter(), tuple(engine.timers())),
                         "timer list", interval_s, name)


def due_text(due_at: float, now: float) -> str:
    """When a timer is due, local time: "14:05:30" today, "Fri 3 Dec 14:05" another day."""
    due, today = datetime.fromtimestamp(due_at), datetime.fromtimestamp(now)
    if due.date() == today.date():
        return due.strftime("%H:%M:%S")
    return f"{due:%a} {due.day} {due:%b %H:%M}"


def left_text(due_at: float, now: float) -> str:
    """The time left: "4:59", "1:02:03", "2 d 3 h"; "due" once it is."""
    left = int(due_at - now + 0.999)  # a second shows until it has fully passed
    if left <= 0:
        return "due"
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


@dataclass
class _Row:
    timer: Timer
    label: QLabel
    due: QLabel
    left: QLabel
    cancel: QPushButton


class TimersPanel(QGroupBox):
    """"Timers": one row per timer or reminder (what, when, time left, Cancel); hidden
    while there is none. ``cancel_requested(timer_id)`` when a Cancel is clicked."""

    cancel_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Timers", parent)
        self.setObjectName("timersPanel")
        self.setAccessibleName("Timers and reminders")
        self.setMinimumWidth(240)
        outer = QVBoxLayout(self)
        self._body = QWidget()
        self._grid = QGridLayout(self._body)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(10)
        self._grid.setVerticalSpacing(2)
        outer.addWidget(self._body)
        outer.addStretch(1)
        self._rows: dict[str, _Row] = {}
        self._gone: set[str] = set()  # fired or cancelled, until a reading no longer lists it
        self._timers: tuple = ()
        self.hide()

    def show_timers(self, timers: tuple, now: float | None = None) -> None:
        """List ``timers`` (the latest reading), soonest first."""
        ids = {t.timer_id for t in timers}
        self._gone &= ids  # the engine no longer has them: nothing to hold back any more
        self._timers = tuple(sorted((t for t in timers if t.timer_id not in self._gone),
                                    key=lambda t: t.due_at))
        self._rebuild(time.time() if now is None else now)

    def forget(self, timer_id: str) -> None:
        """Take a timer off the list now (it fired, or its Cancel was clicked)."""
        self._gone.add(timer_id)
        self._timers = tuple(t for t in self._timers if t.timer_id != timer_id)
        self._rebuild(time.time())

    def tick(self, now: float) -> None:
        """Count the time left down (the window's tick)."""
        for row in self._rows.values():
            text = left_text(row.timer.due_at, now)
            if row.left.text() != text:
                row.left.setText(text)

    def rows(self) -> list[tuple[str, str, str]]:
        """What the list shows: (label, due, time left) per row, in order."""
        return [(r.label.text(), r.due.text(), r.left.text()) for r in self._rows.values()]

    def kind_of(self, timer_id: str) -> str:
        """"timer" or "reminder": what the list last said of ``timer_id`` ("timer" if unknown)."""
        row = self._rows.get(timer_id)
        return row.timer.kind if row is not None else "timer"

    def cancel_button(self, timer_id: str) -> QPushButton:
        """The Cancel button of a listed timer."""
        return self._rows[timer_id].cancel

    def _rebuild(self, now: float) -> None:
        if [t.timer_id for t in self._timers] == list(self._rows) and all(
                r.timer == t for r, t in zip(self._rows.values(), self._timers)):
            self.tick(now)
            return
        clear_layout(self._grid)
        self._rows.clear()
        # Two lines a timer (what; when and how long), the Cancel beside both: the
        # column is narrow, beside the conversation and the meters.
        for i, timer in enumerate(self._timers):
            top = 2 * i
            label = QLabel(timer.label or ("Reminder" if timer.kind == "reminder" else "Timer"))
            label.setObjectName("timerLabel")
            label.setWordWrap(True)
            label.setToolTip(f"A {timer.kind} the assistant set")
            due = QLabel(due_text(timer.due_at, now))
            due.setObjectName("hint")
            due.setToolTip("Due at")
            left = QLabel(left_text(timer.due_at, now))
            left.setObjectName("timerLeft")
            left.setAccessibleName(f"Time left on {label.text()}")
            left.setToolTip("Time left")
            cancel = QPushButton("Cancel")
            cancel.setAccessibleName(f"Cancel {timer.kind} {label.text()}")
            cancel.clicked.connect(lambda _c=False, tid=timer.timer_id: self.cancel_requested.emit(tid))
            self._grid.addWidget(label, top, 0, 1, 2)
            self._grid.addWidget(left, top + 1, 0)
            self._grid.addWidget(due, top + 1, 1)
            self._grid.addWidget(cancel, top, 2, 2, 1)
            self._rows[timer.timer_id] = _Row(timer, label, due, left, cancel)
        self._grid.setColumnStretch(1, 1)
        self.setVisible(bool(self._timers))


class Notifier:
    """A due timer, said on ``banner`` (always) and by the desktop's notifications where
    it has a tray (``QSystemTrayIcon``)."""

    def __init__(self, banner, parent: QWidget) -> None:
        self.banner = banner
        self._parent = parent
        self._tray: QSystemTrayIcon | None = None
        #: Every notification given, in order (what the banner said).
        self.given: list[str] = []

    def notify(self, label: str, due_at: float, kind: str = "timer") -> str:
        """Say that the timer or reminder (``kind``) ``label`` is due (it was due at
        ``due_at``); returns the text."""
        when = datetime.fromtimestamp(due_at).strftime("%H:%M")
        if kind == "reminder":
            text = f"Reminder: {label or 'you asked to be reminded'} (due {when})."
        else:
            text = f"Time's up: {label or 'your timer'} (due {when})."
        self.given.append(text)
        self.banner.show_message(text, "info")
        if QSystemTrayIcon.isSystemTrayAvailable():
            self._tray_icon().showMessage("Parley", text, QSystemTrayIcon.MessageIcon.Information, 10_000)
        return text

    def _tray_icon(self) -> QSystemTrayIcon:
        if self._tray is None:
            icon = QApplication.windowIcon()
            if icon.isNull():
                icon = self._parent.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxInformation)
            self._tray = QSystemTrayIcon(icon, self._parent)
            self._tray.setToolTip("Parley")
            self._tray.show()
        return self._tray

    def close(self) -> None:
        """The window closes: the tray icon goes with it."""
        if self._tray is not None:
            self._tray.hide()
            self._tray = None
