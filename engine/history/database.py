"""The history database file: its schema, the checks before writing to it, migrations.

``open_database`` returns a connection to a checked, migrated database. A file that is
not an SQLite database, fails ``PRAGMA quick_check``, or was written by a newer Parley
(``user_version`` above ``SCHEMA_VERSION``) is never written to: it is renamed aside
(``history.db.corrupt-<UTC time>`` or ``history.db.newer-v<N>-<UTC time>``, with its
``-wal``/``-shm``), a fresh database is started, and the returned notice says what
happened, for the CLI and the app to show.

Durability. The database runs in WAL mode with ``synchronous=FULL``: WAL alone survives a
crash or kill of the process; FULL adds an fsync of the log at each commit, so a
committed turn also survives a power cut or an OS crash.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from engine.errors import ParleyError

log = logging.getLogger("parley.history")

SCHEMA_VERSION = 2
APPLICATION_ID = 0x50524C59  # "PRLY": marks a Parley history database


class HistoryError(ParleyError):
    """The history database cannot be opened or read, or a request names nothing in it."""


def open_database(path: Path, timeout_s: float) -> tuple[sqlite3.Connection, str | None]:
    """A connection to the history database at ``path``, checked and migrated, and a
    notice: None, or a sentence saying that a damaged or newer file was moved aside and a
    new database started. Raises HistoryError when the file can be neither used nor moved."""
    if path.is_dir():
        raise HistoryError(f"the history database {path} is a folder, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HistoryError(f"cannot create the folder of the history database {path}: "
                           f"{exc.strerror or exc}") from None
    try:
        return _open_checked(path, timeout_s), None
    except _MoveAside as aside:
        moved = _move_aside(path, aside.kind)
        notice = (f"the history database {path} {aside.reason}; it was moved aside "
                  f"to {moved} and a new one was started")
        log.info("%s", notice)  # the caller shows it (CLI on stderr, app in its window)
        return _open_checked(path, timeout_s), notice


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

# Version 2: how each turn's words came in (engine.pipeline.metrics.TurnKind); the turns
# stored before it were all spoken.
_SCHEMA_V2 = """
ALTER TABLE turns ADD COLUMN kind TEXT NOT NULL DEFAULT 'spoken'
    CHECK (kind IN ('spoken', 'typed'));
"""

# Each step takes the schema from version N-1 to N, in the transaction that sets N.
_MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1, 2: _SCHEMA_V2}
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


# ----------------------------------------------------------------------------- opening
def _connect(path: Path, timeout_s: float) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, timeout=timeout_s, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise HistoryError(f"cannot open the history database {path}: {exc}") from None


def _open_checked(path: Path, timeout_s: float) -> sqlite3.Connection:
    """Check the file without writing to it, then open it for writing and migrate."""
    _check_file(path, timeout_s)
    conn = _connect(path, timeout_s)
    try:
        _configure(conn, path)
        _migrate(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        if _is_corruption(exc):
            raise _MoveAside("corrupt", f"is damaged ({exc})") from None
        raise HistoryError(f"cannot open the history database {path}: {exc}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _check_file(path: Path, timeout_s: float) -> None:
    """Raise _MoveAside for a file we must not write to. A file that is not SQLite is
    never opened by SQLite, and the check itself runs on a read-only connection: a
    writer would checkpoint or delete the file's ``-wal`` when it closes."""
    try:
        with open(path, "rb") as f:
            header = f.read(16)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise HistoryError(f"cannot read the history database {path}: "
                           f"{exc.strerror or exc}") from None
    if not header:
        return  # an empty file: SQLite makes it a database
    if header != b"SQLite format 3\x00":
        raise _MoveAside("corrupt", "is not an SQLite database")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True,
                               timeout=timeout_s, check_same_thread=False)
    except sqlite3.Error as exc:
        raise HistoryError(f"cannot open the history database {path}: {exc}") from None
    try:
        _check(conn)
    except sqlite3.DatabaseError as exc:
        if _is_corruption(exc):
            raise _MoveAside("corrupt", f"is damaged ({exc})") from None
        raise HistoryError(f"cannot open the history database {path}: {exc}") from None
    finally:
        conn.close()


def _check(conn: sqlite3.Connection) -> None:
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


def _configure(conn: sqlite3.Connection, path: Path) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        log.warning("the history database %s runs in %s mode, not WAL", path, mode)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")


def _migrate(conn: sqlite3.Connection) -> None:
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


def _move_aside(path: Path, kind: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = path.with_name(f"{path.name}.{kind}-{stamp}")
    target, n = base, 1
    while any(Path(f"{target}{s}").exists() for s in ("", "-wal", "-shm")):
        target, n = base.with_name(f"{base.name}-{n}"), n + 1
    try:
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{path}{suffix}")
            if src.exists():
                os.replace(src, f"{target}{suffix}")
    except OSError as exc:
        raise HistoryError(f"the history database {path} cannot be used and could not be "
                           f"moved aside to {target}: {exc.strerror or exc}; move it away "
                           "yourself") from None
    return target


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
