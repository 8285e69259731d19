"""Apply in the settings panel changes the running engine in place, with the real offline
models (Silero VAD, faster-whisper tiny.en, SmolLM2-135M via transformers, Piper).

A conversation of two turns runs from one source that stays open (like a microphone in a
quiet room); Apply changes settings between the second and the third turn. Runtime
settings must reach the running pipeline without loading any model, without touching the
sound devices and without losing the chat history; a new STT compute type must reload the
STT model and nothing else, the conversation going on.
"""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

from app.window.main_window import MainWindow
from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSource
from engine.audio.decode import load_audio
from engine.audio.file_sink import FileSink
from engine.config import STAGES, EngineConfig
from engine.measures import Figure
from tests.support.audio import speech_with_gap
from tests.support.transcripts import normalize

OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "off", "llm.max_new_tokens": 24}
TAIL_S = 2.5  # silence after each part: longer than min_silence_ms + reopen_grace_ms
BLOCK = 512
NEW_PROMPT = "You are Parley. Answer in one short sentence."
ONE_TWO_THREE = ("one two three", "1 2 3")  # Whisper writes either


class GatedSource(AudioSource):
    """16 kHz speech in parts, delivered as fast as it is read; part k > 0 only once
    ``release(k)`` was called. Between parts, and after the last one until ``end()``, it
    stays open and delivers nothing, like a microphone in a quiet room: a source that
    finished ends the unit's input, which closes its devices, and the test decides when
    that happens. Counts ``open`` and ``close``."""

    sample_rate = PIPELINE_RATE

    def __init__(self, parts: list[np.ndarray]) -> None:
        tail = np.zeros(int(TAIL_S * PIPELINE_RATE), np.float32)
        self._parts = [np.concatenate([p, tail]).astype(np.float32) for p in parts]
        self._released = [threading.Event() for _ in parts]
        self._released[0].set()
        self._part = 0
        self._pos = 0
        self._closed = threading.Event()
        self._ended = threading.Event()
        self._level = 0.0
        self.opens = 0
        self.closes = 0

    def release(self, part: int) -> None:
        self._released[part].set()

    def end(self) -> None:
        """The input is over once every part was read."""
        self._ended.set()

    def open(self) -> None:
        self.opens += 1

    def close(self) -> None:
        self.closes += 1
        self._closed.set()

    def read(self, timeout: float) -> AudioBlock | None:
        if self._part >= len(self._parts):  # all said: quiet until ended or closed
            if not self._ended.is_set():
                self._closed.wait(timeout)
            return None
        if self._closed.is_set() or not self._released[self._part].wait(timeout):
            return None
        part = self._parts[self._part]
        samples = np.zeros(BLOCK, np.float32)
        chunk = part[self._pos:self._pos + BLOCK]
        samples[:chunk.size] = chunk
        self._pos += BLOCK
        if self._pos >= part.size:
            self._part, self._pos = self._part + 1, 0
        self._level = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
        return AudioBlock(samples, time.perf_counter())

    @property
    def finished(self) -> bool:
        return self._ended.is_set() and self._part >= len(self._parts)

    @property
    def overflow_count(self) -> int:
        return 0

    @property
    def level(self) -> float:
        return self._level


class CountingSink:
    """A FileSink (unpaced, in memory) that counts ``open`` and ``close``."""

    def __init__(self) -> None:
        self.inner = FileSink(None, realtime=False)
        self.opens = 0
        self.closes = 0

    def open(self) -> None:
        self.opens += 1
        self.inner.open()

    def close(self) -> None:
        self.closes += 1
        self.inner.close()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def _answered(engine) -> list:
    """Finished, not cancelled turns, oldest first."""
    return sorted((t for t in engine.metrics.turns() if t.finished and not t.cancelled),
                  key=lambda t: t.turn_id)


@pytest.fixture
def conversation(qtbot, gui_settings, jfk_path, one_two_three_path):
    """A window on the real offline models, two answered turns into a conversation whose
    source and sink stay open: (window, source, sink). The third part waits for
    ``source.release(1)``."""
    config = EngineConfig().with_overrides(OFFLINE)
    window = MainWindow(config, gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    c = window.controller
    qtbot.waitUntil(lambda: not c.worker.busy, timeout=120_000)  # device discovery
    with qtbot.waitSignal(c.engine_changed, timeout=600_000):
        c.apply(config)
    one_two_three = load_audio(one_two_three_path)
    source = GatedSource([speech_with_gap(load_audio(jfk_path), one_two_three, TAIL_S),
                          one_two_three])
    sink = CountingSink()
    c.start_with([source], [sink])
    engine = c.engine
    qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)
    qtbot.waitUntil(lambda: len(_answered(engine)) >= 2
                    and len(engine.units[0].chat_history.exchanges()) >= 2, timeout=300_000)
    yield window, source, sink
    window.close()


def _third_turn(qtbot, window, source) -> object:
    """Let the third part through; wait until its reply was heard; its TurnRecord."""
    engine = window.controller.engine
    before = len(_answered(engine))
    source.release(1)
    qtbot.waitUntil(lambda: len(_answered(engine)) > before, timeout=300_000)
    return _answered(engine)[-1]


@pytest.mark.slow
def test_runtime_settings_apply_to_the_running_conversation(conversation, qtbot):
    window, source, sink = conversation
    c, panel = window.controller, window.panel
    engine = c.engine
    unit = engine.units[0]
    history = unit.chat_history.exchanges()
    assert len(history) == 2, history  # jfk, then "one two three"
    said = [normalize(ex.user) for ex in history]
    assert "ask not what your country can do for you" in said[0] and said[1] in ONE_TWO_THREE
    models = dict(engine.models)
    loads = {s: c.registry.load_count(s) for s in STAGES}
    assert all(loads[s] == 1 for s in STAGES)  # each model loaded once, by the first load
    snapshot_threads: list[str] = []
    take = engine.snapshot

    def recorded_snapshot():
        snapshot_threads.append(threading.current_thread().name)
        return take()

    engine.snapshot = recorded_snapshot  # the poller calls the instance's attribute
    new_engines: list = []
    c.engine_changed.connect(new_engines.append)

    # The panel says what each pending change will do, before Apply.
    panel.fields["vad.threshold"].setValue(0.6)
    panel.fields["llm.temperature"].setValue(0.3)
    panel.fields["llm.system_prompt"].setText(NEW_PROMPT)
    pending = panel.pending.text()
    assert panel.pending.isVisibleTo(panel)
    for key in ("vad.threshold", "llm.temperature", "llm.system_prompt"):
        assert f"{key}: applies now" in pending, pending
    assert "reload" not in pending
    with qtbot.waitSignal(c.applied, timeout=60_000) as applied:
        panel.apply_button.click()
    diff = applied.args[0]
    assert set(diff.keys()) == {"vad.threshold", "llm.temperature", "llm.system_prompt"}
    assert diff.reload_stages == ()
    assert "applied now" in panel.message.text() and not panel.pending.isVisibleTo(panel)
    assert window.settings.value("llm/system_prompt") == NEW_PROMPT  # saved once applied

    # The same engine, unit, models and open sound devices; nothing loaded.
    assert c.engine is engine and engine.units == [unit] and new_engines == []
    assert {s: c.registry.load_count(s) for s in STAGES} == loads
    assert all(engine.models[s] is models[s] for s in STAGES)
    assert unit.source is source and unit.sink is sink
    assert (source.opens, source.closes, sink.opens, sink.closes) == (1, 0, 1, 0)
    # The running unit took the new settings.
    assert (unit.config.vad.threshold, unit.config.llm.temperature) == (0.6, 0.3)
    assert unit.config.llm.system_prompt == NEW_PROMPT
    assert c.config.llm.system_prompt == NEW_PROMPT and c.state == "listening"

    third = _third_turn(qtbot, window, source)
    assert normalize(third.transcript) in ONE_TWO_THREE
    assert third.figures[Figure.LLM_HISTORY_TURNS] == 2  # its prompt held both earlier turns
    kept = unit.chat_history.exchanges()
    assert kept[:2] == history and len(kept) == 3 and kept[2].turn_id == third.turn_id
    assert {s: c.registry.load_count(s) for s in STAGES} == loads
    assert (source.opens, source.closes, sink.opens, sink.closes) == (1, 0, 1, 0)
    assert sink.audio.size > 0  # replies were spoken into the same sink

    # The meters were fed by the poller thread; the GUI thread never took a snapshot.
    qtbot.waitUntil(lambda: len(snapshot_threads) >= 3, timeout=5_000)
    assert threading.main_thread().name not in snapshot_threads
    assert set(snapshot_threads) <= {c.snapshots.name, "parley-gui-worker"}
    assert c.snapshot() is not None and window.performance.meters.memory.readings

    # The recording ended: the pipeline stops and closes each device once.
    source.end()
    qtbot.waitUntil(lambda: c.state == "ready", timeout=60_000)
    assert (source.closes, sink.closes) == (1, 1)
    window.close()
    assert not c.snapshots.running


@pytest.mark.slow
def test_a_new_stt_compute_type_reloads_only_stt_and_keeps_the_conversation(conversation, qtbot):
    window, source, sink = conversation
    c, panel = window.controller, window.panel
    engine = c.engine
    unit = engine.units[0]
    history = unit.chat_history.exchanges()
    assert len(history) == 2, history
    models = dict(engine.models)
    loads = {s: c.registry.load_count(s) for s in STAGES}
    new_engines: list = []
    c.engine_changed.connect(new_engines.append)

    panel.fields["stt.dtype"].setText("float32")
    assert panel.pending.text() == "stt.dtype: reloads the STT model"
    with qtbot.waitSignal(c.applied, timeout=300_000) as applied:
        panel.apply_button.click()
        assert panel.apply_button.text() == "Loading…" and not panel.apply_button.isEnabled()
    assert applied.args[0].reload_stages == ("stt",)
    assert panel.message.text() == "Reloaded the STT model."
    assert not window.load_row.isVisibleTo(window) and panel.apply_button.isEnabled()

    # Exactly one more STT load; no other model loaded; the new one runs in the unit.
    assert c.registry.load_count("stt") == loads["stt"] + 1
    assert {s: c.registry.load_count(s) for s in STAGES if s != "stt"} == \
        {s: loads[s] for s in STAGES if s != "stt"}
    assert engine.models["stt"] is not models["stt"]
    assert engine.models["stt"].compute_type == "float32"
    assert all(engine.models[s] is models[s] for s in STAGES if s != "stt")
    assert c.engine is engine and engine.units == [unit] and new_engines == []
    assert unit.source is source and unit.sink is sink
    assert (source.opens, source.closes, sink.opens, sink.closes) == (1, 0, 1, 0)
    assert unit.chat_history.exchanges() == history

    third = _third_turn(qtbot, window, source)
    assert unit.stt.model is engine.models["stt"]
    assert normalize(third.transcript) in ONE_TWO_THREE  # heard by the reloaded model
    assert third.figures[Figure.LLM_HISTORY_TURNS] == 2
    assert unit.chat_history.exchanges()[:2] == history
    # The status line names the model as it runs now.
    qtbot.waitUntil(lambda: "stt: faster-whisper" in window.stage_status.text, timeout=5_000)
    assert c.config.stt.dtype == "float32"
    assert window.settings.value("stt/dtype") == "float32"
