"""The window's 10 Hz snapshot feed: who gets the latest EngineSnapshot, and when.

The features subscribe through ``MainWindow.on_tick``. A subscriber that asked for
``fresh`` snapshots gets each one once (a snapshot is recorded once), one that names a
widget (``shown``) only while that widget's tab is the current one (hidden panels are not
drawn).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtWidgets import QWidget


@dataclass
class _Subscriber:
    callback: Callable[[Any], object]
    shown: QWidget | None
    fresh: bool
    last: Any = None  # the snapshot it was last given


class SnapshotFeed:
    """The ``on_tick`` subscribers and their delivery."""

    def __init__(self) -> None:
        self._subscribers: list[_Subscriber] = []

    def subscribe(self, callback: Callable[[Any], object], shown: QWidget | None = None,
                  fresh: bool = False) -> None:
        """``callback(snapshot)`` on every delivery; see the module doc for the options."""
        self._subscribers.append(_Subscriber(callback, shown, fresh))

    def deliver(self, snap, current: QWidget | None) -> None:
        """Hand ``snap`` (None: no engine, or none taken yet) to the subscribers, with
        ``current`` the page of the tab shown now."""
        for sub in self._subscribers:
            if sub.shown is not None and (current is None or not (
                    current is sub.shown or current.isAncestorOf(sub.shown))):
                continue
            if sub.fresh:
                if snap is None or snap is sub.last:
                    continue
                sub.last = snap
            sub.callback(snap)

    def reset(self) -> None:
        """A new engine: its first snapshot is news to every subscriber."""
        for sub in self._subscribers:
            sub.last = None
