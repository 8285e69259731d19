"""engine.recording without models: what run_recording and load_engine do with an engine.

The real pipeline through it is covered by test_cli.py and test_selftest.py; here a
stand-in engine checks the contract: events to the callback, errors returned, the
deadline, stuck threads, this run's turns only, placements before loading, no printing.
"""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import numpy as np
import pytest

from engine import recording
from engine.config import EngineConfig
from engine.pipeline.events import EngineError, FinalTranscript, ReplyText


class FakeEngine:
    """Just what run_recording uses: subscribe, start, wait_drained, stop, metrics."""

    def __init__(self, events=(), drained=True, stuck=(), old_turn_at=None) -> None:
        self.config = EngineConfig()
        self.events = list(events)
        self.drained = drained
        self.stuck = list(stuck)
        self.listeners = []
        self.started_with = None
        self.stopped = False
        self.polls = 0
        self._turns = []
        self.metrics = SimpleNamespace(turns=lambda: list(self._turns))
        if old_turn_at is not None:  # a turn of an earlier run on the same engine
            self._turns.append(SimpleNamespace(turn_id=0, marks={"speech_start": old_turn_at}))

    def subscribe(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def start(self, sources, sinks):
        self.started_with = (sources, sinks)
        self._turns.append(SimpleNamespace(turn_id=1, marks={"speech_start": time.perf_counter()}))
        for event in self.events:
            for listener in list(self.listeners):
                listener(event)

    def wait_drained(self, timeout=None):
        self.polls += 1
        return self.drained or self.polls > 50  # never hang a test that lost its deadline

    def stop(self, timeout=2.0):
        self.stopped = True
        return self.stuck


AUDIO = np.zeros(16000, dtype=np.float32)


def test_run_recording_passes_events_on_and_returns_errors_without_printing(capsys):
    events = [FinalTranscript(0, 1, "hello"), EngineError(0, "llm", "boom"), ReplyText(0, 1, "hi")]
    engine = FakeEngine(events)
    seen = []
    turns, errors = recording.run_recording(engine, AUDIO, None, realtime=False, on_event=seen.append)
    assert seen == events
    assert errors == ["llm: boom"]
    assert [t.turn_id for t in turns] == [1]
    assert engine.stopped and engine.listeners == []  # unsubscribed after the run
    assert capsys.readouterr() == ("", "")  # the caller decides what to show


def test_run_recording_feeds_the_recording_with_trailing_silence_to_a_file_sink(tmp_path):
    engine = FakeEngine()
    recording.run_recording(engine, AUDIO, str(tmp_path / "reply.wav"), realtime=False)
    (source,), (sink,) = engine.started_with
    trailing = recording.trailing_silence_s(engine.config)
    cfg = engine.config
    assert trailing == pytest.approx((cfg.vad.min_silence_ms + cfg.turns.reopen_grace_ms) / 1000 + 0.5)
    assert source.duration_s == pytest.approx(1.0 + trailing, abs=0.05)
    assert sink.path == tmp_path / "reply.wav" and sink.realtime is False


def test_run_recording_reports_stuck_threads_and_only_this_runs_turns():
    engine = FakeEngine(stuck=["parley-u0-llm"], old_turn_at=time.perf_counter() - 100)
    turns, errors = recording.run_recording(engine, AUDIO, None, realtime=False)
    assert errors == ["threads did not stop: parley-u0-llm"]
    assert [t.turn_id for t in turns] == [1]


def test_run_recording_gives_up_at_its_deadline(monkeypatch):
    engine = FakeEngine(drained=False)
    ticks = itertools.count()  # every reading 700 s after the last: past "duration x0 + 600 s"
    monkeypatch.setattr(recording.time, "perf_counter", lambda: 1000.0 + 700.0 * next(ticks))
    turns, errors = recording.run_recording(engine, AUDIO, None, realtime=False)
    assert errors == ["the pipeline did not finish within its time limit"]
    assert engine.stopped and [t.turn_id for t in turns] == [1]


def test_load_engine_shows_placements_before_loading(monkeypatch):
    calls = []

    class Engine:
        def __init__(self, config, registry=None, hub=None):
            calls.append(("init", config, registry, hub))

        def load(self, progress=None):
            calls.append(("load", progress))

    monkeypatch.setattr(recording, "Engine", Engine)
    config, registry, hub, progress = EngineConfig(), object(), object(), print
    engine = recording.load_engine(config, registry, progress, hub=hub,
                                   resolved=lambda e: calls.append(("resolved", e)))
    assert calls == [("init", config, registry, hub), ("resolved", engine), ("load", progress)]
