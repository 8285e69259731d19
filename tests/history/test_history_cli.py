"""The history from outside: ``parley-cli history`` and a conversation killed with SIGKILL.

The kill tests run a child interpreter (``child_main`` below) that does what
``parley-cli converse`` does with the history: the real offline pipeline on a recording,
every finished turn recorded by ``engine.history.recorder.record_history``. The child prints
``speaking <turn>`` at each speech start and ``finished <turn>`` once a turn's
transaction committed (``on_stored``); the parent kills it between turns and in the
middle of one, then checks that the database opens cleanly and holds every turn that
was finished, and no partial one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.cli.history import add_history_parser, run_history
from engine.history.store import HistoryStore
from engine.measures import Figure
from engine.pipeline.metrics import Metrics
from tests.support.cli import run_cli
from tests.support.history import PLACEMENTS, fill, make_turn

ROOT = Path(__file__).resolve().parents[2]
CHILD = "import sys; from tests.history.test_history_cli import child_main; child_main(sys.argv[1:])"
REPORT_KEYS = {f.value for f in Figure if f.report}


# ----------------------------------------------------------------------------- the CLI
def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="parley-cli")
    add_history_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["history", *argv])


def history(capsys, *argv: str) -> tuple[int, str, str]:
    code = run_history(parse(*argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "history.db"
    with HistoryStore(path) as store:
        first = fill(store)
        second = store.start_conversation("desktop")
        store.add_turn(second, make_turn(Metrics(), 1, "Play some jazz", "Here is some jazz."))
    assert (first, second) == (1, 2)
    return path


def test_list_shows_conversations_newest_first(capsys, db):
    code, out, err = history(capsys, "list", "--db", str(db))
    assert code == 0, err
    header, newest, oldest = out.splitlines()
    assert header.split() == ["ID", "STARTED", "TURNS", "SOURCE", "TITLE"]
    assert newest.split()[0] == "2" and "Play some jazz" in newest and "desktop" in newest
    assert oldest.split()[0] == "1" and "What is the capital of France?" in oldest
    assert oldest.split()[4] == "2"  # turns (after the date, time and offset)

    code, out, _ = history(capsys, "list", "--db", str(db), "--json", "--limit", "1")
    data = json.loads(out)
    assert data["database"] == str(db)
    assert [(c["id"], c["turns"], c["source"]) for c in data["conversations"]] == [(2, 1, "desktop")]


def test_list_by_day(capsys, db):
    today = time.strftime("%Y-%m-%d")
    code, out, _ = history(capsys, "list", "--db", str(db), "--day", today, "--json")
    assert code == 0 and len(json.loads(out)["conversations"]) == 2
    code, out, err = history(capsys, "list", "--db", str(db), "--day", "1999-01-01")
    assert code == 0 and out == "" and "no conversations on 1999-01-01" in err


def test_show_prints_each_turn_or_json(capsys, db):
    code, out, err = history(capsys, "show", "1", "--db", str(db))
    assert code == 0, err
    assert out.startswith("conversation 1 · started ")
    assert "converse:test.wav" in out and "stt: faster-whisper tiny.en on cpu" in out
    assert "you:    What is the capital of France?" in out
    assert "parley: It is about 330 metres tall." in out
    assert "voice-to-voice: 650 ms" in out
    code, out, _ = history(capsys, "show", "1", "--db", str(db), "--json")
    data = json.loads(out)
    assert data["id"] == 1 and data["placements"] == PLACEMENTS
    assert [t["turn_id"] for t in data["turns"]] == [1, 2]
    assert REPORT_KEYS <= set(data["turns"][0])  # the keys of `converse --json`


def test_search_prints_hits_with_snippets(capsys, db):
    code, out, err = history(capsys, "search", "jazz", "--db", str(db))
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("conversation 2 turn 1 (") and "[jazz]" in line
    code, out, _ = history(capsys, "search", "metres OR capital", "--db", str(db), "--json")
    hits = json.loads(out)["hits"]
    assert sorted((h["conversation_id"], h["turn_id"]) for h in hits) == [(1, 1), (1, 2)]
    code, out, err = history(capsys, "search", "nothing-like-this", "--literal", "--db", str(db))
    assert code == 0 and out == "" and "nothing matches" in err


def test_export_markdown_to_stdout_and_json_to_a_file(capsys, db, tmp_path):
    code, out, err = history(capsys, "export", "1", "--format", "md", "--db", str(db))
    assert code == 0, err
    assert out.startswith("# What is the capital of France?") and "## Turn 2" in out
    target = tmp_path / "conversation.json"
    code, out, err = history(capsys, "export", "1", "--format", "json", "--output", str(target),
                             "--db", str(db))
    assert code == 0 and out == "" and f"written to {target}" in err
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["format"] == "parley-history" and len(data["turns"]) == 2


def test_delete_needs_yes(capsys, db):
    code, _, err = history(capsys, "delete", "1", "--db", str(db))
    assert code == 2 and "--yes" in err
    with HistoryStore(db) as store:
        assert len(store.conversations()) == 2
    code, _, err = history(capsys, "delete", "1", "--yes", "--db", str(db))
    assert code == 0 and "conversation 1 deleted (2 turns)" in err
    with HistoryStore(db) as store:
        assert [c.id for c in store.conversations()] == [2]
        assert store.search("capital") == []


@pytest.mark.parametrize("argv, fragment", [
    (["show", "42"], "no conversation 42"),
    (["export", "42", "--format", "md"], "no conversation 42"),
    (["delete", "42", "--yes"], "no conversation 42"),
    (["list", "--day", "yesterday"], "YYYY-MM-DD"),
    (["list", "--limit", "0"], "--limit must be at least 1"),
    (["search", '"open'], "not a valid query"),
    (["search", "  "], "at least one word"),
    (["export", "1", "--format", "md", "--output", "/nonexistent-folder/x.md"], "does not exist"),
])
def test_errors_are_one_line_and_exit_2(capsys, db, argv, fragment):
    code, out, err = history(capsys, *argv, "--db", str(db))
    assert code == 2 and out == ""
    assert err.startswith("parley-cli: error: ") and fragment in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["export", "1", "--format", "pdf"], ["export", "1"], ["show", "one"],
                                  ["frobnicate"]])
def test_bad_arguments_are_refused_by_the_parser_with_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_reading_a_missing_database_creates_nothing(capsys, tmp_path):
    missing = tmp_path / "none" / "history.db"
    code, out, err = history(capsys, "list", "--db", str(missing))
    assert code == 0 and "no conversations yet" in err
    code, out, _ = history(capsys, "search", "x", "--db", str(missing), "--json")
    assert code == 0 and json.loads(out)["hits"] == []
    code, _, err = history(capsys, "show", "1", "--db", str(missing))
    assert code == 2 and "does not exist" in err
    assert not missing.parent.exists()


def test_a_damaged_database_is_reported_and_moved_aside(capsys, tmp_path):
    path = tmp_path / "history.db"
    path.write_bytes(b"\x00garbage" * 100)
    code, _, err = history(capsys, "list", "--db", str(path))
    assert code == 0
    assert err.startswith("parley-cli: note: the history database") and "moved aside" in err
    assert any(p.name.startswith("history.db.corrupt-") for p in tmp_path.iterdir())


def test_the_default_database_is_in_the_data_folder(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path))
    with HistoryStore(tmp_path / "history.db") as store:
        fill(store)
    code, out, _ = history(capsys, "list", "--json")
    assert code == 0 and json.loads(out)["database"] == str(tmp_path / "history.db")


def test_a_long_source_keeps_its_end_in_the_list(capsys, tmp_path):
    path = tmp_path / "history.db"
    with HistoryStore(path) as store:
        store.start_conversation("converse:/a/very/long/folder/name/recordings/meeting.wav")
    code, out, _ = history(capsys, "list", "--db", str(path))
    assert code == 0 and "…/recordings/meeting.wav" in out


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    path = tmp_path / "history.db"
    with HistoryStore(path) as store:
        for i in range(3000):
            store.start_conversation(f"source {i}")
    script = ("import sys; from tests.history.test_history_cli import parse; from engine.cli.history import "
              "run_history; sys.exit(run_history(parse('list', '--limit', '3000', '--db', sys.argv[1])))")
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().split()[0] == "ID"
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_parley_cli_history_list_in_a_fresh_interpreter(db):
    result = run_cli("history", "list", "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    assert [c["id"] for c in json.loads(result.stdout)["conversations"]] == [2, 1]
    result = run_cli("history", "show", "99", "--db", str(db))
    assert result.returncode == 2 and "no conversation 99" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_parley_cli_converse_records_every_turn(tmp_path, one_two_three_path):
    env = {"PARLEY_DATA_DIR": str(tmp_path)}
    result = run_cli("converse", str(one_two_three_path), "--fast", "--json", env=env)
    assert result.returncode == 0, result.stderr
    turns = json.loads(result.stdout)["turns"]
    listed = run_cli("history", "list", "--json", env=env)
    (conversation,) = json.loads(listed.stdout)["conversations"]
    assert conversation["turns"] == len(turns) and str(one_two_three_path) in conversation["source"]
    shown = json.loads(run_cli("history", "show", str(conversation["id"]), "--json", env=env).stdout)
    assert [t["transcript"] for t in shown["turns"]] == [t["transcript"] for t in turns]
    other = tmp_path / "other"
    result = run_cli("converse", str(one_two_three_path), "--fast", "--no-history",
                     env={"PARLEY_DATA_DIR": str(other)})
    assert result.returncode == 0, result.stderr
    assert not (other / "history.db").exists()


# ----------------------------------------------------------------------------- the child
_say_lock = threading.Lock()


def _say(line: str) -> None:
    with _say_lock:  # lines from several threads never interleave
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def child_main(argv: list[str]) -> None:
    """``pipeline DB WAV realtime|fast``: the offline stack on WAV, recording the history.
    ``stress DB``: finished turns as fast as the writer takes them, no models."""
    mode, db = argv[0], argv[1]
    if mode == "stress":
        _child_stress(db)
    else:
        _child_pipeline(db, argv[2], argv[3] == "realtime")


def _child_pipeline(db: str, wav: str, realtime: bool) -> None:
    from engine.audio.decode import load_audio
    from engine.config import EngineConfig
    from engine.pipeline.events import UserSpeaking
    from engine.history.recorder import record_history
    from engine.recording import load_engine, run_recording

    engine = load_engine(EngineConfig().with_overrides({"turns.barge_in": "off"}))
    recorder = record_history(engine, f"converse:{wav}", db,
                              on_stored=lambda record: _say(f"finished {record.turn_id}"))
    _say("ready")

    def on_event(event) -> None:
        if isinstance(event, UserSpeaking):
            _say(f"{'speaking' if event.started else 'committed'} {event.turn_id}")

    run_recording(engine, load_audio(wav), None, realtime=realtime, on_event=on_event)
    problems = recorder.close()
    engine.close()
    _say(f"done {json.dumps(problems)}")


def _child_stress(db: str) -> None:
    from engine.pipeline.events import EventHub, TurnFinished
    from engine.history.recorder import HistoryRecorder

    hub, metrics = EventHub(), Metrics()
    store = HistoryStore(db)
    HistoryRecorder(store, hub.subscribe, "stress",
                    on_stored=lambda record: _say(f"finished {record.turn_id}"))
    _say("ready")
    for i in itertools.count(1):
        hub.emit(TurnFinished(0, make_turn(metrics, i, f"turn {i} " + "words " * 30, f"reply {i} " * 20)))
        time.sleep(0.001)


class Child:
    """A child interpreter whose stdout lines are collected as they come."""

    def __init__(self, *argv: str, log: Path) -> None:
        self._err = open(log, "w")  # closed in kill()
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, *argv], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=self._err)
        self.lines: list[str] = []
        self.fresh: queue.Queue[str | None] = queue.Queue()
        self.log = log
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            self.fresh.put(line.strip())
        self.fresh.put(None)

    def next_line(self, deadline: float) -> str:
        try:
            line = self.fresh.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            self.kill()
            pytest.fail(f"the child said nothing in time; its stderr:\n{self.stderr()}")
        if line is None:
            pytest.fail(f"the child ended early (exit {self.proc.wait()}); its stderr:\n{self.stderr()}")
        return line

    def kill(self) -> list[str]:
        """SIGKILL (TerminateProcess on Windows); returns every line it wrote before dying."""
        self.proc.kill()
        self.proc.wait(30)
        self._reader.join(30)
        self._err.close()
        return list(self.lines)

    def stderr(self) -> str:
        self._err.flush()
        return self.log.read_text(errors="replace")[-4000:]


def stored_turn_count(db: Path) -> int:
    """Read-only, as another process would: the turns committed so far."""
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT count(*) FROM turns").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:  # the schema is being created
        return 0


def check_after_kill(db: Path, lines: list[str], earlier: dict[int, int] | None = None) -> list:
    """The database opens cleanly; it holds every turn the child saw committed, whole,
    plus at most the one committed in the instant it died, and the conversations of
    ``earlier`` runs ({id: turns}) unchanged. Returns the child's stored turns."""
    earlier = earlier or {}
    finished = [int(line.split()[1]) for line in lines if line.startswith("finished ")]
    with HistoryStore(db) as store:
        assert store.notice is None  # opened as it is: not damaged, nothing moved aside
        conn = store._live()
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("INSERT INTO turns_fts(turns_fts) VALUES('integrity-check')").fetchall() == []
        everything = [store.conversation(c.id) for c in store.conversations(limit=None)]
    for conversation in everything:
        for turn in conversation.turns:  # whole turns only
            assert turn.transcript.strip() and not turn.cancelled
            assert "reply_done" in turn.timeline and REPORT_KEYS <= set(turn.figures)
            assert turn.placements == conversation.placements
    assert {c.id: len(c.turns) for c in everything if c.id in earlier} == earlier
    new = [c for c in everything if c.id not in earlier]
    assert len(new) <= 1
    turns = list(new[0].turns) if new else []
    ids = [t.turn_id for t in turns]
    assert len(ids) == len(set(ids))
    assert set(finished) <= set(ids), f"finished {finished}, stored {ids}"
    assert len(set(ids) - set(finished)) <= 1, f"finished {finished}, stored {ids}"
    return turns


def check_writable(db: Path) -> None:
    with HistoryStore(db) as store:
        cid = store.start_conversation("after the crash")
        store.add_turn(cid, make_turn(Metrics(), 1, "still here?", "yes"))
        assert len(store.search("still")) == 1
        store.delete(cid)


@pytest.fixture(scope="module")
def four_turns_wav(tmp_path_factory, one_two_three_path) -> Path:
    """"One, two, three" four times, 4 s of silence before and after each."""
    from engine.audio.decode import load_audio
    from tests.support.audio import write_wav

    words = load_audio(str(one_two_three_path))
    gap = np.zeros(4 * 16000, np.float32)
    audio = np.concatenate([gap[: 2 * 16000], *[x for _ in range(4) for x in (words, gap)]])
    return write_wav(tmp_path_factory.mktemp("kill") / "four_turns.wav", audio, 16000)


def _start_pipeline(tmp_path: Path, wav: Path) -> tuple[Child, Path]:
    db = tmp_path / "history.db"
    child = Child("pipeline", str(db), str(wav), "realtime", log=tmp_path / "child.err")
    deadline = time.monotonic() + 300  # models load first
    while child.next_line(deadline) != "ready":
        pass
    return child, db


@pytest.mark.slow
def test_sigkill_between_turns_keeps_every_finished_turn(tmp_path, four_turns_wav):
    child, db = _start_pipeline(tmp_path, four_turns_wav)
    deadline = time.monotonic() + 120
    while stored_turn_count(db) < 2:  # the second turn just committed; the third not begun
        if time.monotonic() > deadline or child.proc.poll() is not None:
            child.kill()
            pytest.fail(f"two turns were never stored; child said {child.lines}\n{child.stderr()}")
        time.sleep(0.01)
    lines = child.kill()
    turns = check_after_kill(db, lines)
    assert len(turns) == 2, lines  # the third turn's words were still 4 s away
    assert all(t.transcript and t.reply for t in turns)
    check_writable(db)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["speaking", "committed"])
def test_sigkill_mid_turn_keeps_the_finished_turns_and_no_partial_one(tmp_path, four_turns_wav,
                                                                       kill_at):
    """Killed as the third turn's speech starts, or as it is committed (its
    transcription, reply and speech then run, or have just run, speculatively)."""
    child, db = _start_pipeline(tmp_path, four_turns_wav)
    deadline = time.monotonic() + 120
    started: list[int] = []
    while True:
        word, turn = child.next_line(deadline).partition(" ")[::2]
        if word == "speaking" and turn.isdigit() and int(turn) not in started:
            started.append(int(turn))
        if len(started) == 3 and word == kill_at and int(turn) == started[2]:
            break
    lines = child.kill()  # the third turn is in flight
    turns = check_after_kill(db, lines)  # and if it finished in that instant, it is whole
    ids = [t.turn_id for t in turns]
    assert started[0] in ids and set(ids) <= set(started), (ids, lines)
    if kill_at == "speaking":
        assert started[2] not in ids  # its words were still being said
    check_writable(db)


@pytest.mark.parametrize("kills", [(3, 17, 40, 1, 25)])
def test_sigkill_during_writes_never_loses_a_committed_turn(tmp_path, kills):
    """Without models, turns finish back to back, so the kills land in the middle of
    transactions; each round appends a conversation to the same database."""
    db = tmp_path / "history.db"
    earlier: dict[int, int] = {}
    for n, after in enumerate(kills):
        child = Child("stress", str(db), log=tmp_path / f"stress{n}.err")
        deadline = time.monotonic() + 60
        seen = 0
        while seen < after:
            seen += child.next_line(deadline).startswith("finished ")
        lines = child.kill()
        turns = check_after_kill(db, lines, earlier)
        ids = [t.turn_id for t in turns]
        assert len(ids) >= after and ids == list(range(1, len(ids) + 1))  # in order, no gap
        earlier[turns[0].conversation_id] = len(turns)
    check_writable(db)


def test_child_scripts_are_importable_without_side_effects():
    # The kill tests import this module in the child; importing must not run anything.
    result = subprocess.run([sys.executable, "-c", "import tests.history.test_history_cli"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
