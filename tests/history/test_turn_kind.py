"""Each stored turn says how the user's words came in, spoken or typed (``TurnKind``):
in the store's records, its search results, its exports, and in a database written before
turns had a kind (schema version 1), which is migrated in place."""

from __future__ import annotations

import json
import sqlite3

import pytest

from engine.history import database
from engine.history.store import HistoryStore
from engine.pipeline.metrics import Metrics, TurnKind
from tests.support.history import make_turn


def _typed(metrics: Metrics, turn_id: int, transcript: str, reply: str):
    make_turn(metrics, turn_id, transcript, reply)
    metrics.set_kind(0, turn_id, TurnKind.TYPED)
    return metrics.turn(0, turn_id)


def test_records_carry_their_kind_through_store_search_and_export(tmp_path):
    m = Metrics()
    spoken = make_turn(m, 1, "What is the weather like in Oslo?", "Cold and clear.")
    typed = _typed(m, 2, "And what about Lisbon?", "Mild and sunny.")
    assert (spoken.kind, typed.kind) == (TurnKind.SPOKEN, TurnKind.TYPED)
    with HistoryStore(tmp_path / "history.db") as store:
        cid = store.start_conversation("desktop")
        store.add_turn(cid, spoken)
        row = store.add_turn(cid, typed)
        store.update_turn(row, typed, cancelled=True)  # a later update keeps the kind
        one, two = store.conversation(cid).turns
        assert (one.kind, two.kind) == (TurnKind.SPOKEN, TurnKind.TYPED)
        assert one.as_dict()["kind"] == "spoken" and two.as_dict()["kind"] == "typed"
        (hit,) = store.search("Lisbon")
        assert hit.kind is TurnKind.TYPED and hit.as_dict()["kind"] == "typed"
        (hit,) = store.search("Oslo")
        assert hit.kind is TurnKind.SPOKEN
        exported = json.loads(store.export(cid, "json"))
        assert [t["kind"] for t in exported["turns"]] == ["spoken", "typed"]
        markdown = store.export(cid, "md")
        assert markdown.count("**You (typed):**") == 1 and markdown.count("**You:**") == 1
        assert markdown.index("**You:**") < markdown.index("**You (typed):**")


def _version_1_database(path) -> None:
    """A history file as Parley wrote it before turns had a kind: one conversation, one turn."""
    with sqlite3.connect(path) as raw:
        for statement in database._split_sql(database._SCHEMA_V1):
            raw.execute(statement)
        raw.execute(f"PRAGMA application_id={database.APPLICATION_ID}")
        raw.execute("PRAGMA user_version=1")
        raw.execute("INSERT INTO conversations(started_at, source) "
                    "VALUES ('2025-01-02T03:04:05.678Z', 'desktop')")
        raw.execute("INSERT INTO turns(conversation_id, turn_id, unit, finished_at, transcript, "
                    "reply) VALUES (1, 1, 0, '2025-01-02T03:04:09.000Z', 'Hello old friend', 'Hi!')")
    raw.close()


def test_a_version_1_database_is_migrated_its_turns_spoken(tmp_path):
    path = tmp_path / "history.db"
    _version_1_database(path)
    with HistoryStore(path) as store:
        assert store.notice is None  # migrated in place, not moved aside
        (old,) = store.conversation(1).turns
        assert old.kind is TurnKind.SPOKEN and old.transcript == "Hello old friend"
        store.add_turn(1, _typed(Metrics(), 2, "Typed after the upgrade", "Fine."))
        assert [t.kind for t in store.conversation(1).turns] == [TurnKind.SPOKEN, TurnKind.TYPED]
        assert store.search("upgrade")[0].kind is TurnKind.TYPED
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == database.SCHEMA_VERSION == 2
    raw.close()
    assert list(tmp_path.iterdir()) == [path] or all(
        p.name.startswith("history.db") and "corrupt" not in p.name for p in tmp_path.iterdir())


def test_the_database_refuses_a_kind_it_does_not_know(tmp_path):
    path = tmp_path / "history.db"
    with HistoryStore(path) as store:
        cid = store.start_conversation("desktop")
        store.add_turn(cid, make_turn(Metrics(), 1, "hi", "hello"))
    with sqlite3.connect(path) as raw, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        raw.execute("UPDATE turns SET kind='shouted'")
    raw.close()
