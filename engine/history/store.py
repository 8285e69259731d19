"""The conversation history: every finished turn, stored as it completes, searchable.

One SQLite database in the user's data folder (``history_path()``): a table of
conversations, a table of turns (transcript, reply, timeline, figures, placements) and
an FTS5 index over transcripts and replies, kept in step by triggers.

Durability. The database runs in WAL mode with ``synchronous=FULL``, and each turn is
written in one transaction (the first turn of a conversation creates it in the same
transaction). WAL alone already survives a crash or kill of the process; FULL adds an
fsync of the log at each commit, so a committed turn also survives a power cut or an
OS crash. That fsync costs a few milliseconds once per turn, off the pipeline: the
stage thread that emits ``TurnFinished`` only puts the record on a queue, and a small
writer thread (``HistoryRecorder``) commits it. A turn is durable once its transaction
commits, milliseconds after ``TurnFinished``; a crash or kill loses at most the turn in
flight (and, in that instant, one that finished but was not yet committed).

Robustness. A file that is not an SQLite database, fails ``PRAGMA quick_check``, or
was written by a newer Parley (``user_version`` above ``SCHEMA_VERSION``) is never
written to: it is renamed aside (``history.db.corrupt-<UTC time>`` or
``history.db.newer-v<N>-<UTC time>``, with its ``-wal``/``-shm``), a fresh database is
started, and ``HistoryStore.notice`` says what happened, for the CLI and the app to
show.

Threads. ``HistoryStore`` guards its one connection with a lock, so any thread may call
it (the GUI reads while the recorder writes); several stores, in one process or in
several, may open the same file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from engine.errors import ParleyError
from engine.pipeline.control import CancelReason
from engine.pipeline.events import Event, TurnCancelled, TurnFinished
from engine.pipeline.metrics import TurnRecord

log = logging.getLogger("parley.history")

SCHEMA_VERSION = 1
APPLICATION_ID = 0x50524C59  # "PRLY": marks a Parley history database
DB_NAME = "history.db"
EXPORT_FORMATS = ("md", "json")
_TURN_KEYS = ("turn_id", "transcript", "reply", "cancelled", "timeline")  # turn_dict's non-figures


class HistoryError(ParleyError):
    """The history database cannot be opened or read, or a request names nothing in it."""


# ----------------------------------------------------------------------------- paths
def data_dir() -> Path:
    """The folder for Parley's own data: ``$PARLEY_DATA_DIR`` or the user data folder."""
    env = os.environ.get("PARLEY_DATA_DIR")
    if env:
        return Path(env)
    if platform.system() == "Darwin":
        return Path.home() / "Library" / "Application Support" / "Parley"
    if platform.system() == "Windows":
        return Path(os.environ.get("APPDATA", Path.home())) / "Parley"
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "parley"


def history_path() -> Path:
    """Where the history database lives by default."""
    return data_dir() / DB_NAME


# ----------------------------------------------------------------------------- times
def utc_now() -> str:
    return utc_iso(datetime.now(UTC))


def utc_iso(moment: datetime) -> str:
    """A fixed-width UTC timestamp (``2025-01-02T03:04:05.678Z``): sorts as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def local_time(stamp: str, seconds: bool = True) -> str:
    """A stored UTC timestamp in local time with its offset, for people."""
    moment = datetime.fromisoformat(stamp).astimezone()
    text = moment.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    return f"{text} {moment.strftime('%z')[:3]}:{moment.strftime('%z')[3:]}"


def parse_day(day: date | str) -> date:
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

    def as_dict(self) -> dict:
        """The keys of a ``parley-cli converse --json`` turn, then where and when."""
        return {"turn_id": self.turn_id, "transcript": self.transcript, "reply": self.reply,
                "cancelled": self.cancelled, "timeline": self.timeline, **self.figures,
                "unit": self.unit, "finished_at": self.finished_at, "placements": self.placements}


@dataclass(frozen=True, slots=True)
class ConversationSummary:
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
    conversation_id: int
    title: str
    started_at: str
    turn_row: int
    turn_id: int
    finished_at: str
    transcript: str
    reply: str
    snippet: str  # the best-matching column, matches between the marks

    def as_dict(self) -> dict:
        return {"conversation_id": self.conversation_id, "title": self.title,
                "started_at": self.started_at, "turn_id": self.turn_id,
                "finished_at": self.finished_at, "transcript": self.transcript,
                "reply": self.reply, "snippet": self.snippet}


def figures_of(record: TurnRecord) -> dict[str, Any]:
    """A turn's figures exactly as ``parley-cli converse --json`` reports them."""
    from engine.report import turn_dict

    return {k: v for k, v in turn_dict(record).items() if k not in _TURN_KEYS}


# ----------------------------------------------------------------------------- schema
_SCHEMA_V1 = """
CREATE TABLE conversations (
    id          INTEGER PRIMARY KEY,
    started_at  TEXT NOT NULL,              -- UTC, utc_iso()
    title       TEXT NOT NULL DEFAULT '',   -- the first transcript
    source      TEXT NOT NULL,              -- desktop, converse:<file>, realtime...
    placements  TEXT NOT NULL DEFAULT '[]'  -- JSON: report.placement_dict per stage
);
CREATE INDEX conversations_started ON conversations(started_at);
CREATE TABLE turns (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    turn_id         INTEGER NOT NULL,
    unit            INTEGER NOT NULL,
    finished_at     TEXT NOT NULL,
    transcript      TEXT NOT NULL,
    reply           TEXT NOT NULL,
    cancelled       INTEGER NOT NULL DEFAULT 0,
    timeline        TEXT NOT NULL DEFAULT '{}',  -- JSON: seconds after the end of speech
    figures         TEXT NOT NULL DEFAULT '{}',  -- JSON: report.turn_dict's figures
    placements      TEXT NOT NULL DEFAULT '[]'   -- JSON: the placements of this turn
);
CREATE INDEX turns_conversation ON turns(conversation_id, id);
CREATE VIRTUAL TABLE turns_fts USING fts5(
    transcript, reply, content='turns', content_rowid='id',
    tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER turns_ai AFTER INSERT ON turns BEGIN
    INSERT INTO turns_fts(rowid, transcript, reply) VALUES (new.id, new.transcript, new.reply);
END;
CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
    INSERT INTO turns_fts(turns_fts, rowid, transcript, reply)
        VALUES ('delete', old.id, old.transcript, old.reply);
END;
CREATE TRIGGER turns_au AFTER UPDATE ON turns BEGIN
    INSERT INTO turns_fts(turns_fts, rowid, transcript, reply)
        VALUES ('delete', old.id, old.transcript, old.reply);
    INSERT INTO turns_fts(rowid, transcript, reply) VALUES (new.id, new.transcript, new.reply);
END;
"""

# Each step takes the schema from version N-1 to N, in the transaction that sets N.
_MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1}
_OUR_TABLES = {"conversations", "turns", "turns_fts"}


class _MoveAside(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind  # "corrupt" or "newer-v<N>"
        self.reason = reason


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """Not a database, or a damaged one (as opposed to locked, unreadable, no space)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


# ----------------------------------------------------------------------------- store
class HistoryStore:
    """The history database; open it with ``HistoryStore(path)`` (default: the data folder).

    ``notice`` is None, or a sentence saying that a damaged or newer database was moved
    aside and a new one started. Every method may be called from any thread.
    """

    def __init__(self, path: str | Path | None = None, *, timeout_s: float = 10.0) -> None:
        self.path = Path(path) if path is not None else history_path()
        self.notice: str | None = None
        self._timeout_s = timeout_s
        self._lock = threading.RLock()
        self._depth = 0  # nesting of transaction()
        if self.path.is_dir():
            raise HistoryError(f"the history database {self.path} is a folder, not a file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"cannot create the folder of the history database {self.path}: "
                               f"{exc.strerror or exc}") from None
        try:
            self._conn = self._open_checked()
        except _MoveAside as aside:
            moved = self._move_aside(aside.kind)
            self.notice = (f"the history database {self.path} {aside.reason}; it was moved aside "
                           f"to {moved} and a new one was started")
            log.info("%s", self.notice)  # the caller shows it (CLI on stderr, app in its window)
            self._conn = self._open_checked()

    # ------------------------------------------------------------------ opening
    def _connect(self) -> sqlite3.Connection:
        try:
            return sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot open the history database {self.path}: {exc}") from None

    def _open_checked(self) -> sqlite3.Connection:
        """Check the file without writing to it, then open it for writing and migrate."""
        self._check_file()
        conn = self._connect()
        try:
            self._configure(conn)
            self._migrate(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if _is_corruption(exc):
                raise _MoveAside("corrupt", f"is damaged ({exc})") from None
            raise HistoryError(f"cannot open the history database {self.path}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_file(self) -> None:
        """Raise _MoveAside for a file we must not write to. A file that is not SQLite is
        never opened by SQLite, and the check itself runs on a read-only connection: a
        writer would checkpoint or delete the file's ``-wal`` when it closes."""
        try:
            with open(self.path, "rb") as f:
                header = f.read(16)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise HistoryError(f"cannot read the history database {self.path}: "
                               f"{exc.strerror or exc}") from None
        if not header:
            return  # an empty file: SQLite makes it a database
        if header != b"SQLite format 3\x00":
            raise _MoveAside("corrupt", "is not an SQLite database")
        try:
            conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True,
                                   timeout=self._timeout_s, check_same_thread=False)
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot open the history database {self.path}: {exc}") from None
        try:
            self._check(conn)
        except sqlite3.DatabaseError as exc:
            if _is_corruption(exc):
                raise _MoveAside("corrupt", f"is damaged ({exc})") from None
            raise HistoryError(f"cannot open the history database {self.path}: {exc}") from None
        finally:
            conn.close()

    def _check(self, conn: sqlite3.Connection) -> None:
        """Raise _MoveAside for a file we must not write to."""
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(20)")]
        if problems != ["ok"]:
            lines = [ln.strip() for p in problems for ln in str(p).splitlines()
                     if ln.strip() and not ln.startswith("***")]
            more = ", and more" if len(lines) > 2 else ""
            raise _MoveAside("corrupt", f"is damaged (quick_check: {'; '.join(lines[:2])}{more})")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise _MoveAside(f"newer-v{version}",
                             f"was written by a newer Parley (schema version {version}; this one "
                             f"reads up to {SCHEMA_VERSION})")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id not in (0, APPLICATION_ID) or (version == 0 and tables - {"sqlite_sequence"}):
            raise _MoveAside("corrupt", "is an SQLite database but not a Parley history")
        if version >= 1 and not _OUR_TABLES <= tables:
            raise _MoveAside("corrupt", f"lacks tables {', '.join(sorted(_OUR_TABLES - tables))}")

    def _configure(self, conn: sqlite3.Connection) -> None:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("the history database %s runs in %s mode, not WAL", self.path, mode)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for target in range(version + 1, SCHEMA_VERSION + 1):
            conn.execute("BEGIN IMMEDIATE")
            try:
                # re-read under the write lock: another process may have migrated meanwhile
                if conn.execute("PRAGMA user_version").fetchone()[0] >= target:
                    conn.execute("COMMIT")
                    continue
                for statement in _split_sql(_MIGRATIONS[target]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={target}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _move_aside(self, kind: str) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        base = self.path.with_name(f"{self.path.name}.{kind}-{stamp}")
        target, n = base, 1
        while any(Path(f"{target}{s}").exists() for s in ("", "-wal", "-shm")):
            target, n = base.with_name(f"{base.name}-{n}"), n + 1
        try:
            for suffix in ("", "-wal", "-shm"):
                src = Path(f"{self.path}{suffix}")
                if src.exists():
                    os.replace(src, f"{target}{suffix}")
        except OSError as exc:
            raise HistoryError(f"the history database {self.path} cannot be used and could not be "
                               f"moved aside to {target}: {exc.strerror or exc}; move it away "
                               "yourself") from None
        return target

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
        conn = getattr(self, "_conn", None)
        if conn is None:
            raise HistoryError(f"the history database {self.path} is closed")
        return conn

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._live().execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            conn, self._conn = getattr(self, "_conn", None), None
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
            return int(cur.lastrowid)

    def add_turn(self, conversation_id: int, record: TurnRecord, *,
                 placements: list[dict] | None = None, finished_at: str | None = None) -> int:
        """Store one turn in one transaction; returns its row id. The first transcript
        becomes the conversation's title."""
        row = (record.turn_id, record.unit, finished_at or utc_now(), record.transcript,
               record.reply, int(record.cancelled), json.dumps(record.timeline()),
               json.dumps(figures_of(record)), json.dumps(placements or []))
        with self.transaction():
            conn = self._live()
            if not conn.execute("SELECT 1 FROM conversations WHERE id=?",
                                (conversation_id,)).fetchone():
                raise HistoryError(f"no conversation {conversation_id} in {self.path}")
            cur = conn.execute(
                "INSERT INTO turns(turn_id, unit, finished_at, transcript, reply, cancelled, "
                "timeline, figures, placements, conversation_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (*row, conversation_id))
            self._set_title(conversation_id, record.transcript)
            return int(cur.lastrowid)

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
                               "reply, cancelled, timeline, figures, placements FROM turns "
                               "WHERE conversation_id=? ORDER BY id", (conversation_id,))
        turns = tuple(StoredTurn(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]),
                                 json.loads(r[8]), json.loads(r[9]), json.loads(r[10])) for r in rows)
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
                "t.reply, snippet(turns_fts, -1, ?, ?, '…', 12) FROM turns_fts "
                "JOIN turns t ON t.id = turns_fts.rowid JOIN conversations c ON c.id = t.conversation_id "
                "WHERE turns_fts MATCH ? ORDER BY bm25(turns_fts), t.id LIMIT ?",
                (marks[0], marks[1], match, int(limit)))
        except sqlite3.OperationalError as exc:
            raise HistoryError(f"search {query!r} is not a valid query ({exc}); use words, "
                               '"a phrase", word*, AND, OR, NOT, or search the words as typed '
                               "(--literal)") from None
        return [SearchHit(*row) for row in rows]

    def export(self, conversation_id: int, format: str = "md") -> str:
        """The conversation as Markdown (``md``) or JSON (``json``) text."""
        if format not in EXPORT_FORMATS:
            raise HistoryError(f"export format {format!r} is not known; use one of "
                               f"{', '.join(EXPORT_FORMATS)}")
        conversation = self.conversation(conversation_id)
        if format == "json":
            return json.dumps({"format": "parley-history", "version": SCHEMA_VERSION,
                               **conversation.as_dict()}, indent=2, ensure_ascii=False) + "\n"
        return conversation_markdown(conversation)


# ----------------------------------------------------------------------------- export
def short_model(model: str) -> str:
    """A model as people read it: a path keeps its last two parts (the package's folder and
    the file), a hub name stays whole."""
    parts = Path(model).parts
    return "/".join(parts[-2:]) if len(parts) > 2 or Path(model).is_absolute() else model


def describe_placement(placement: dict) -> str:
    """``stt: faster-whisper tiny.en on cpu`` from a ``placement_dict``."""
    device = placement.get("actual_device") or placement.get("device", "?")
    return (f"{placement.get('stage', '?')}: {placement.get('backend', '?')} "
            f"{short_model(str(placement.get('model', '?')))} on {device}")


def _models(placements: list[dict]) -> list[str]:
    return [f"  - {describe_placement(p)}" for p in placements]


def conversation_markdown(conversation: StoredConversation) -> str:
    """A conversation as a Markdown document: a header, then each turn's words."""
    title = conversation.title or f"Conversation {conversation.id}"
    lines = [f"# {title}", "",
             f"- Conversation: {conversation.id}",
             f"- Started: {local_time(conversation.started_at)}",
             f"- Source: {conversation.source}"]
    if conversation.placements:
        lines += ["- Models:", *_models(conversation.placements)]
    lines.append("")
    shown = conversation.placements
    for turn in conversation.turns:
        lines += [f"## Turn {turn.turn_id} · {local_time(turn.finished_at)}", ""]
        if turn.placements and turn.placements != shown:
            lines += ["Models from this turn on:", "", *(m[2:] for m in _models(turn.placements)), ""]
            shown = turn.placements
        lines += ["**You:**", "", turn.transcript or "*(no words recognised)*", "",
                  "**Parley:**", "", turn.reply or "*(no reply)*", ""]
        notes = []
        if turn.cancelled:
            notes.append("cut off")
        v2v = turn.figures.get("voice_to_voice_s")
        if v2v is not None:
            notes.append(f"voice-to-voice {v2v * 1000:.0f} ms")
        if notes:
            lines += [f"*{', '.join(notes)}*", ""]
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------- recorder
PlacementsFn = Callable[[], list[dict]]
StoredFn = Callable[[TurnRecord], None]


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
    recognised or said is not kept.
    """

    def __init__(self, store: HistoryStore, subscribe: Callable[[Callable[[Event], None]],
                                                                Callable[[], None]],
                 source: str, *, metrics: Any = None, placements: PlacementsFn | None = None,
                 conversation_id: int | None = None, on_stored: StoredFn | None = None,
                 owns_store: bool = False) -> None:
        self.store = store
        self.source = source
        self.conversation_id = conversation_id
        self.errors: list[str] = []
        self._metrics = metrics
        self._placements = placements or (lambda: [])
        self._on_stored = on_stored
        self._owns_store = owns_store
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

    def listen(self, event: Event) -> None:
        """The event listener: queue a finished (or cut-off) turn; never touches disk."""
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


def engine_placements(engine: Any) -> list[dict]:
    """Each stage's placement and where its model really is, as ``placement_dict``."""
    from engine.report import placement_dict

    return [placement_dict(p, getattr(engine.models.get(s), "actual_device", None))
            for s, p in engine.placements.items()]


def record_history(engine: Any, source: str, store: HistoryStore | str | Path | None = None, *,
                   on_stored: StoredFn | None = None) -> HistoryRecorder:
    """Record every finished turn of ``engine`` into the history until ``close()``.

    ``store``: an open ``HistoryStore`` (left open on close), or a database path, or None
    for the user's data folder (opened here, closed on close; may raise HistoryError).
    ``source`` labels the conversation (``converse:<file>``, ``desktop``, ``realtime``).
    The recorder's ``notice`` is set when a damaged database was moved aside.
    """
    owns = not isinstance(store, HistoryStore)
    opened = HistoryStore(store) if owns else store
    return HistoryRecorder(opened, engine.subscribe, source, metrics=engine.metrics,
                           placements=lambda: engine_placements(engine), on_stored=on_stored,
                           owns_store=owns)


def _split_sql(script: str) -> list[str]:
    """Statements of a schema script; trigger bodies keep their inner semicolons."""
    statements, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = "\n".join(current).strip()
        if text.endswith(";") and sqlite3.complete_statement(text):
            statements.append(text)
            current = []
    if "\n".join(current).strip():
        statements.append("\n".join(current).strip())
    return statements
