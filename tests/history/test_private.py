"""Private by default, in the history: a private stretch (the app's Private conversation,
``parley-cli --private``) and ``history.enabled = false`` store nothing while turns
happen; storing again opens a new conversation. Real ``TurnRecord``s, a real database in
a temporary folder, the engine's events emitted as the stages emit them."""

from __future__ import annotations

import sqlite3

import pytest

from engine.config import EngineConfig
from engine.history.recorder import record_history
from engine.history.store import HistoryStore
from engine.pipeline.events import EventHub, TurnCancelled, TurnFinished
from engine.pipeline.metrics import Metrics
from tests.support.history import make_turn


class Engine:
    """What record_history reads of an engine: events, metrics, placements, its config
    (replaced whole, as ``Engine.apply`` does)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.events = EventHub()
        self.metrics = Metrics()

    def placement_dicts(self) -> list[dict]:
        return []

    def subscribe(self, listener):
        return self.events.subscribe(listener)

    def finish(self, turn: int, said: str) -> None:
        self.events.emit(TurnFinished(0, make_turn(self.metrics, turn, said, f"reply to {said}")))


def _rows(db) -> tuple[int, int]:
    with sqlite3.connect(db) as raw:
        return (raw.execute("SELECT count(*) FROM conversations").fetchone()[0],
                raw.execute("SELECT count(*) FROM turns").fetchone()[0])


@pytest.fixture
def db(tmp_path):
    return tmp_path / "history.db"


def test_a_private_conversation_stores_nothing_and_the_next_one_is_new(db):
    engine = Engine(EngineConfig())
    recorder = record_history(engine, "desktop", db)
    engine.finish(1, "before")
    assert recorder.flush()
    assert _rows(db) == (1, 1)
    recorder.set_private(True)
    assert recorder.private
    engine.finish(2, "my bank details")
    make_turn(engine.metrics, 3, "cut off while private", "Once", finished=False, cancelled=True)
    engine.events.emit(TurnCancelled(0, 3, "barge-in"))
    assert recorder.flush()
    assert _rows(db) == (1, 1)  # while private, nothing more was written
    recorder.set_private(False)
    engine.finish(4, "after")
    assert recorder.close() == []
    with HistoryStore(db) as store:
        stored = [[t.transcript for t in store.conversation(c.id).turns]
                  for c in reversed(store.conversations())]
    assert stored == [["before"], ["after"]]  # the private part is in neither


def test_a_whole_private_run_leaves_an_empty_database(db):
    engine = Engine(EngineConfig())
    recorder = record_history(engine, "chat", db)
    recorder.set_private(True)
    for turn in (1, 2, 3):
        engine.finish(turn, f"question {turn}")
    assert recorder.close() == []
    assert _rows(db) == (0, 0)


def test_history_off_stores_nothing_and_an_apply_turning_it_on_stores_again(db):
    engine = Engine(EngineConfig().with_overrides({"history.enabled": "false"}))
    recorder = record_history(engine, "desktop", db)
    engine.finish(1, "not kept")
    assert recorder.flush()
    assert _rows(db) == (0, 0)
    engine.config = engine.config.with_overrides({"history.enabled": True})  # Apply, in place
    engine.finish(2, "kept")
    assert recorder.close() == []
    with HistoryStore(db) as store:
        (conversation,) = store.conversations()
        assert [t.transcript for t in store.conversation(conversation.id).turns] == ["kept"]


def test_history_enabled_is_a_setting_that_applies_now():
    from engine.config_diff import Effect, effect_of

    assert EngineConfig().history.enabled
    assert effect_of("history.enabled") is Effect.RUNTIME
    assert not EngineConfig().with_overrides({"history.enabled": "off"}).history.enabled
