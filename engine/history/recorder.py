"""Recording an engine's finished turns into the history, as they complete.

A turn is written in one transaction (the first turn of a conversation creates it in the
same transaction), and each commit fsyncs the log (``engine.history.database``): a few
milliseconds once per turn, off the pipeline. The stage thread that emits
``TurnFinished`` only puts the record on a queue, and a small writer thread
(``HistoryRecorder``, thread ``history-writer``) commits it. A turn is durable once its
transaction commits, milliseconds after ``TurnFinished``; a crash or kill loses at most the
turn in flight (and, in that instant, one that finished but was not yet committed).

Nothing is stored while ``history.enabled`` is off (read per turn: the app's Settings
change it in place) or while the recorder is private (``set_private``: the app's
Private conversation); such a turn is dropped in the listener, never queued.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.history.store import HistoryStore, utc_now
from engine.pipeline.control import CancelReason
from engine.pipeline.events import Event, TurnCancelled, TurnFinished
from engine.pipeline.metrics import TurnRecord

log = logging.getLogger("parley.history")

PlacementsFn = Callable[[], list[dict]]
StoredFn = Callable[[TurnRecord], None]
EnabledFn = Callable[[], bool]


_NEW_CONVERSATION = object()  # the writer's marker: the next turn starts a conversation


class HistoryRecorder:
    """Records each finished turn of an event stream into the history, as it completes.

    The listener runs on the stage thread that emits the event and only queues the
    record (with the time and the placements of that moment); a writer thread commits
    each turn in its own transaction, then calls ``on_stored(record)``. The conversation
    is created with its first turn, so a run without turns leaves nothing behind.

    Stored: every ``TurnFinished``, and a turn cut off by barge-in (``TurnCancelled``
    with reason ``barge-in``, given ``metrics`` to read it from) with ``cancelled=1``;
    a turn stored before it was cut off is updated. A turn cut off before any word was
    recognised or said is not kept. Nothing is stored while ``enabled()`` is False or
    the recorder is private (``set_private``).
    """

    def __init__(self, store: HistoryStore, subscribe: Callable[[Callable[[Event], None]],
                                                                Callable[[], None]],
                 source: str, *, metrics: Any = None, placements: PlacementsFn | None = None,
                 conversation_id: int | None = None, on_stored: StoredFn | None = None,
                 owns_store: bool = False, enabled: EnabledFn | None = None) -> None:
        self.store = store
        self.source = source
        self.conversation_id = conversation_id
        self.errors: list[str] = []
        self._metrics = metrics
        self._placements = placements or (lambda: [])
        self._on_stored = on_stored
        self._owns_store = owns_store
        self._enabled = enabled or (lambda: True)
        self._private = False
        self._started_at = utc_now()
        self._conversation_placements = self._placements()
        self._rows: dict[tuple[int, int], int] = {}  # (unit, turn_id) -> row; writer thread only
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._write_loop, name="history-writer", daemon=True)
        self._thread.start()
        self._unsubscribe = subscribe(self.listen)

    @property
    def notice(self) -> str | None:
        return self.store.notice

    @property
    def private(self) -> bool:
        """True while no turn is stored (``set_private``)."""
        return self._private

    def set_private(self, private: bool) -> None:
        """Start (True) or end (False) a private stretch: the turns that finish meanwhile
        are not stored. Either way the next stored turn opens a new conversation, so no
        stored conversation has a private part."""
        if private != self._private:
            self._private = private
            self.new_conversation()

    def listen(self, event: Event) -> None:
        """The event listener: queue a finished (or cut-off) turn; never touches disk."""
        if self._private or not self._enabled():
            return
        if isinstance(event, TurnFinished):
            self._queue.put((event.record, False, self._placements(), utc_now()))
        elif isinstance(event, TurnCancelled) and event.reason == CancelReason.BARGE_IN and self._metrics:
            record = self._metrics.turn(event.unit, event.turn_id)
            if record is not None:
                self._queue.put((record, True, self._placements(), utc_now()))

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            if item is _NEW_CONVERSATION:
                # In the writer's order: turns queued before it stay in the old one.
                self.conversation_id = None
                self._started_at = utc_now()
                self._conversation_placements = self._placements()
                self._rows.clear()
                continue
            record, cancelled, placements, finished_at = item
            try:
                stored = self._write(record, cancelled, placements, finished_at)
            except Exception as exc:  # disk full, locked too long: say so, keep recording
                log.exception("could not store turn %s in %s", record.turn_id, self.store.path)
                self.errors.append(f"turn {record.turn_id} was not stored in the history "
                                   f"({self.store.path}): {exc}")
                continue
            if stored and self._on_stored is not None:
                try:
                    self._on_stored(record)
                except Exception:
                    log.exception("on_stored failed for turn %s", record.turn_id)

    def _write(self, record: TurnRecord, cancelled: bool, placements: list[dict],
               finished_at: str) -> bool:
        key = (record.unit, record.turn_id)
        row = self._rows.get(key)
        if row is not None:
            self.store.update_turn(row, record, cancelled=cancelled or record.cancelled)
            return True
        if cancelled:
            if not (record.transcript.strip() or record.reply.strip()):
                return False  # cut off before a word was recognised: nothing to keep
            if not record.cancelled:
                record = replace(record, cancelled=True)
        with self.store.transaction():
            if self.conversation_id is None:
                self.conversation_id = self.store.start_conversation(
                    self.source, self._conversation_placements, self._started_at)
            self._rows[key] = self.store.add_turn(self.conversation_id, record,
                                                  placements=placements, finished_at=finished_at)
        return True

    def new_conversation(self) -> None:
        """The user started over: the next turn opens a new conversation in the history
        (the turns queued before this call still go to the current one)."""
        self._queue.put(_NEW_CONVERSATION)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every turn queued so far is committed; False on timeout."""
        if not self._thread.is_alive():
            return self._queue.empty()
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> list[str]:
        """Stop listening, commit what is queued, stop the writer; returns the problems
        (turns not stored), empty when every turn was stored."""
        if self._closed:
            return list(self.errors)
        self._closed = True
        self._unsubscribe()
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append(f"the history writer did not finish within {timeout:.0f} s; "
                               "the last turns may be missing from the history")
        elif self._owns_store:
            self.store.close()
        return list(self.errors)

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_history(engine: Any, source: str, store: HistoryStore | str | Path | None = None, *,
                   on_stored: StoredFn | None = None) -> HistoryRecorder:
    """Record every finished turn of ``engine`` into the history until ``close()``, while
    its ``history.enabled`` setting is on (read per turn, so an Apply turns it off or on).

    ``store``: an open ``HistoryStore`` (left open on close), or a database path, or None
    for the user's data folder (opened here, closed on close; may raise HistoryError).
    ``source`` labels the conversation (``converse:<file>``, ``desktop``, ``realtime``).
    The recorder's ``notice`` is set when a damaged database was moved aside.
    """
    owns = not isinstance(store, HistoryStore)
    opened = HistoryStore(store) if owns else store
    return HistoryRecorder(opened, engine.subscribe, source, metrics=engine.metrics,
                           placements=engine.placement_dicts, on_stored=on_stored,
                           owns_store=owns, enabled=lambda: engine.config.history.enabled)
