"""The conversation history: every finished turn, stored as it completes, searchable.

One SQLite database in the user's data folder (``history_path()``): a table of
conversations, a table of turns (transcript, reply, how it came in: spoken or typed,
timeline, figures, placements) and
an FTS5 index over transcripts and replies, kept in step by triggers. The file itself (its
schema, the checks before writing, a damaged or newer file moved aside) is
``engine.history.database``; recording an engine's turns is ``engine.history.recorder``;
Markdown and JSON export is ``engine.history.export``.

Threads. ``HistoryStore`` guards its one connection with a lock, so any thread may call
it (the GUI reads while the recorder writes); several stores, in one process or in
several, may open the same file.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from engine.history.database import HistoryError, open_database
from engine.history.export import conversation_text, require_export_format
from engine.pipeline.metrics import TurnKind, TurnRecord
from engine.runtime.paths import data_dir  # the data folder (re-exported: store.data_dir)

DB_NAME = "history.db"
_TURN_KEYS = ("turn_id", "transcript", "reply", "cancelled", "timeline")  # turn_dict's non-figures


# ----------------------------------------------------------------------------- paths
def history_path() -> Path:
    """Where the history database lives by default."""
    return data_dir() / DB_NAME


# ----------------------------------------------------------------------------- times
def utc_now() -> str:
    """Now, as a stored timestamp."""
    return utc_iso(datetime.now(UTC))


def utc_iso(moment: datetime) -> str:
    """A fixed-width UTC timestamp (``2025-01-02T03:04:05.678Z``): sorts as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_day(day: date | str) -> date:
    """A calendar day from ``YYYY-MM-DD``; HistoryError names the format otherwise."""
    if isinstance(day, date):
        return day
    try:
        return date.fromisoformat(day)
    except ValueError:
        raise HistoryError(f"day {day!r} is not a date: expected YYYY-MM-DD, e.g. "
                           f"{date.today().isoformat()}") from None


def _day_bounds(day: date) -> tuple[str, str]:
    """The local calendar day as a UTC [start, end) range of stored timestamps."""
    start = datetime.combine(day, time.min).astimezone()
    end = datetime.combine(day + timedelta(days=1), time.min).astimezone()
    return utc_iso(start), utc_iso(end)


# ----------------------------------------------------------------------------- records
@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One stored turn; ``id`` is its row, ``turn_id`` the engine's number."""

    id: int
    conversation_id: int
    turn_id: int
    unit: int
    finished_at: str
    transcript: str
    reply: str
    cancelled: bool
    timeline: dict[str, float]
    figures: dict[str, Any]
    placements: list[dict]
    kind: TurnKind = TurnKind.SPOKEN  # how the user's words came in

    def as_dict(self) -> dict:
        """The keys of a ``parley-cli converse --json`` turn, then how, where and when."""
        return {"turn_id": self.turn_id, "transcript": self.transcript, "reply": self.reply,
                "cancelled": self.cancelled, "timeline": self.timeline, **self.figures,
                "kind": self.kind.value, "unit": self.unit, "finished_at": self.finished_at,
                "placements": self.placements}


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One line of the conversation list: when, what about, how many turns."""

    id: int
    started_at: str
    title: str
    source: str
    turns: int
    last_at: str | None

    def as_dict(self) -> dict:
        return {"id": self.id, "started_at": self.started_at, "title": self.title,
                "source": self.source, "turns": self.turns, "last_at": self.last_at}


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """A stored conversation with its turns, in the order they finished."""

    id: int
    started_at: str
    title: str
    source: str
    placements: list[dict]
    turns: tuple[StoredTurn, ...]

    def as_dict(self) -> dict:
        return {"id": self.id, "started_at": self.started_at, "title": self.title,
                "source": self.source, "placements": self.placements,
                "turns": [t.as_dict() for t in self.turns]}


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A turn that matched a search, with the conversation it belongs to."""

    conversation_id: int
    title: str
    started_at: str
    turn_row: int
    turn_id: int
    finished_at: str
    transcript: str
    reply: str
    snippet: str  # the best-matching column, matches between the marks
    kind: TurnKind = TurnKind.SPOKEN  # how the user's words came in

    def as_dict(self) -> dict:
        return {"conversation_id": self.conversation_id, "title": self.title,
                "started_at": self.started_at, "turn_id": self.turn_id,
                "finished_at": self.finished_at, "transcript": self.transcript,
                "reply": self.reply, "snippet": self.snippet, "kind": self.kind.value}


def figures_of(record: TurnRecord) -> dict[str, Any]:
    """A turn's figures exactly as ``parley-cli converse --json`` reports them."""
    from engine.report import turn_dict

    return {k: v for k, v in turn_dict(record).items() if k not in _TURN_KEYS}


# ----------------------------------------------------------------------------- store
class HistoryStore:
    """The history database; open it with ``HistoryStore(path)`` (default: the data folder).

    ``notice`` is None, or a sentence saying that a damaged or newer database was moved
    aside and a new one started. Every method may be called from any thread.
    """

    def __init__(self, path: str | Path | None = None, *, timeout_s: float = 10.0) -> None:
        self.path = Path(path) if path is not None else history_path()
        self._lock = threading.RLock()
        self._depth = 0  # nesting of transaction()
        conn, self.notice = open_database(self.path, timeout_s)
        self._conn: sqlite3.Connection | None = conn

    # ------------------------------------------------------------------ plumbing
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (nested calls join the outer one); holds the lock."""
        with self._lock:
            conn = self._live()
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                conn.execute("ROLLBACK")
                raise
            self._depth = 0
            try:
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise

    def _live(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise HistoryError(f"the history database {self.path} is closed")
        return conn

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._live().execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def journal_mode(self) -> str:
        return str(self._query("PRAGMA journal_mode")[0][0])

    # ------------------------------------------------------------------ writing
    def start_conversation(self, source: str, placements: list[dict] | None = None,
                           started_at: str | None = None) -> int:
        """A new, empty conversation; returns its id."""
        with self.transaction():
            cur = self._live().execute(
                "INSERT INTO conversations(started_at, source, placements) VALUES (?, ?, ?)",
                (started_at or utc_now(), source, json.dumps(placements or [])))
            return _inserted_row(cur)

    def add_turn(self, conversation_id: int, record: TurnRecord, *,
                 placements: list[dict] | None = None, finished_at: str | None = None) -> int:
        """Store one turn in one transaction; returns its row id. The first transcript
        becomes the conversation's title."""
        row = (record.turn_id, record.unit, finished_at or utc_now(), record.transcript,
               record.reply, int(record.cancelled), json.dumps(record.timeline()),
               json.dumps(figures_of(record)), json.dumps(placements or []), record.kind.value)
        with self.transaction():
            conn = self._live()
            if not conn.execute("SELECT 1 FROM conversations WHERE id=?",
                                (conversation_id,)).fetchone():
                raise HistoryError(f"no conversation {conversation_id} in {self.path}")
            cur = conn.execute(
                "INSERT INTO turns(turn_id, unit, finished_at, transcript, reply, cancelled, "
                "timeline, figures, placements, kind, conversation_id) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (*row, conversation_id))
            self._set_title(conversation_id, record.transcript)
            return _inserted_row(cur)

    def update_turn(self, row_id: int, record: TurnRecord, *, cancelled: bool | None = None) -> None:
        """Replace a stored turn's texts, timeline and figures (a reply cut off after it
        was stored); ``cancelled`` only ever goes from 0 to 1."""
        flag = record.cancelled if cancelled is None else cancelled
        with self.transaction():
            self._live().execute(
                "UPDATE turns SET transcript=?, reply=?, cancelled=max(cancelled, ?), timeline=?, "
                "figures=? WHERE id=?",
                (record.transcript, record.reply, int(flag), json.dumps(record.timeline()),
                 json.dumps(figures_of(record)), row_id))

    def _set_title(self, conversation_id: int, transcript: str) -> None:
        title = " ".join(transcript.split())
        if title:
            title = title if len(title) <= 80 else title[:79].rstrip() + "…"
            self._live().execute("UPDATE conversations SET title=? WHERE id=? AND title=''",
                                 (title, conversation_id))

    def delete(self, conversation_id: int) -> int:
        """Remove a conversation and its turns; returns how many turns went."""
        with self.transaction():
            conn = self._live()
            self._require(conversation_id)
            n = conn.execute("DELETE FROM turns WHERE conversation_id=?", (conversation_id,)).rowcount
            conn.execute("DELETE FROM conversations WHERE id=?", (conversation_id,))
            return n

    # ------------------------------------------------------------------ reading
    def _require(self, conversation_id: int) -> tuple:
        rows = self._query("SELECT id, started_at, title, source, placements FROM conversations "
                           "WHERE id=?", (conversation_id,))
        if not rows:
            raise HistoryError(f"no conversation {conversation_id} in {self.path} "
                               "(`parley-cli history list` shows them)")
        return rows[0]

    def conversations(self, day: date | str | None = None, limit: int | None = 50
                      ) -> list[ConversationSummary]:
        """Newest first; ``day``: only those started on that local calendar day."""
        where, params = "", ()
        if day is not None:
            where, params = "WHERE c.started_at >= ? AND c.started_at < ?", _day_bounds(parse_day(day))
        sql = ("SELECT c.id, c.started_at, c.title, c.source, count(t.id), max(t.finished_at) "
               f"FROM conversations c LEFT JOIN turns t ON t.conversation_id = c.id {where} "
               "GROUP BY c.id ORDER BY c.started_at DESC, c.id DESC")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [ConversationSummary(*row) for row in self._query(sql, params)]

    def conversation(self, conversation_id: int) -> StoredConversation:
        """A conversation with its turns in the order they finished."""
        with self._lock:
            cid, started, title, source, placements = self._require(conversation_id)
            rows = self._query("SELECT id, conversation_id, turn_id, unit, finished_at, transcript, "
                               "reply, cancelled, timeline, figures, placements, kind FROM turns "
                               "WHERE conversation_id=? ORDER BY id", (conversation_id,))
        turns = tuple(StoredTurn(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]),
                                 json.loads(r[8]), json.loads(r[9]), json.loads(r[10]),
                                 TurnKind(r[11])) for r in rows)
        return StoredConversation(cid, started, title, source, json.loads(placements), turns)

    def search(self, query: str, limit: int = 50, *, literal: bool = False,
               marks: tuple[str, str] = ("[", "]")) -> list[SearchHit]:
        """Turns whose transcript or reply match ``query`` (FTS5 syntax: words, "a phrase",
        word*, AND/OR/NOT, NEAR()), best first. ``literal``: the words as typed."""
        words = query.split()
        if not words:
            raise HistoryError("search needs at least one word")
        match = " ".join('"' + w.replace('"', '""') + '"' for w in words) if literal else query
        try:
            rows = self._query(
                "SELECT c.id, c.title, c.started_at, t.id, t.turn_id, t.finished_at, t.transcript, "
                "t.reply, snippet(turns_fts, -1, ?, ?, '…', 12), t.kind FROM turns_fts "
                "JOIN turns t ON t.id = turns_fts.rowid JOIN conversations c ON c.id = t.conversation_id "
                "WHERE turns_fts MATCH ? ORDER BY bm25(turns_fts), t.id LIMIT ?",
                (marks[0], marks[1], match, int(limit)))
        except sqlite3.OperationalError as exc:
            raise HistoryError(f"search {query!r} is not a valid query ({exc}); use words, "
                               '"a phrase", word*, AND, OR, NOT, or search the words as typed '
                               "(--literal)") from None
        return [SearchHit(*row[:-1], kind=TurnKind(row[-1])) for row in rows]

    def export(self, conversation_id: int, format: str = "md") -> str:
        """The conversation as Markdown (``md``) or JSON (``json``) text."""
        require_export_format(format)
        return conversation_text(self.conversation(conversation_id), format)


def _inserted_row(cursor: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (SQLite always sets it after one)."""
    if cursor.lastrowid is None:
        raise HistoryError("the history database did not report the row it inserted")
    return cursor.lastrowid
