"""Meters, graphs and the conversation view, fed real EngineSnapshots and real events."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

from app.core.bridge import EventBridge
from app.conversation.view import ConversationView
from app.performance.graphs import SEGMENTS, GraphsPanel, turn_segments
from app.core.widgets import LevelMeter
from app.performance.meters import MetersPanel
from app.core.push_to_talk import PushToTalkSource
from app.core.display import short_model
from app.window.status_line import StageStatus
from engine.audio.file_source import FileSource
from engine.pipeline.critical_path import Segment
from engine.pipeline.events import (EngineError, FinalTranscript, PartialTranscript, ReplyText, TurnCancelled,
                                    TurnFinished, UserSpeaking)
from tests.support.gui import recorded_metrics, snapshot_from


def test_meters_show_queues_memory_and_no_mlx_lock(qtbot):
    panel = MetersPanel()
    qtbot.addWidget(panel)
    panel.show()
    snap = snapshot_from(recorded_metrics())
    panel.update_snapshot(snap)
    assert panel.queues.depths == {"vad": (0, 1), "stt": (1, 8), "llm": (2, 8), "tts": (0, 16),
                                   "sink": (3, 64)}
    bar, text = panel.queues._rows["llm"]
    assert bar.value == pytest.approx(2 / 8) and text.text().startswith("2/8")
    cpu = panel.memory.readings["cpu"]
    assert cpu.used_bytes > 10 * 2**20 and cpu.available_bytes > 0  # this process's real RSS
    _name, mem_bar, value, detail = panel.memory._rows["cpu"]
    assert mem_bar.value == pytest.approx(cpu.used_bytes / cpu.total_bytes)
    assert "MiB" in value.text() or "GiB" in value.text()
    assert "available" in detail.text()
    assert not panel.lock.in_use and panel.lock.detail.text() == "no MLX stage in use"


def test_level_meter_reads_dbfs():
    meter = LevelMeter()
    meter.set_level(0.1, active=True)
    assert meter.db == pytest.approx(-20.0)
    assert meter.bar.value == pytest.approx(40 / 60)
    meter.set_level(0.1, active=True, passing=False)
    assert "muted" in meter.text.text()
    meter.set_level(0.5, active=False)
    assert meter.bar.value == 0 and meter.text.text() == "mic off"


def test_latency_bars_stack_the_stages_of_each_turn(qtbot):
    metrics = recorded_metrics(turns=3)
    graphs = GraphsPanel()
    qtbot.addWidget(graphs)
    graphs.show()
    graphs.update_snapshot(snapshot_from(metrics))
    assert graphs.redraw()
    turns = metrics.turns()
    assert graphs.latency.numbers == [1, 2, 3]
    assert graphs.latency.totals_ms == pytest.approx([t.voice_to_voice * 1000 for t in turns])
    # engine.pipeline.critical_path's parts, in its order: silence, STT, the end-of-turn
    # text signal (none here), LLM to the first token and on to the first clause, TTS,
    # commit / lock / queue waits (none here), the hand-off before STT (engine overhead),
    # to the speaker.
    seg = turn_segments(turns[0])
    assert seg == pytest.approx([0.50, 0.20, 0.0, 0.20, 0.10, 0.05, 0.0, 0.0, 0.0, 0.05, 0.02])
    assert SEGMENTS == tuple(Segment)
    heights = {segment: list(graphs.latency.bars[segment].opts["height"]) for segment in SEGMENTS}
    assert heights[Segment.STT] == pytest.approx([200.0] * 3)
    assert list(graphs.latency.bars[Segment.LLM_FIRST_TOKEN].opts["y0"]) == pytest.approx([700.0] * 3)
    # Tokens/s and real-time factors are per turn; memory and stage times over time.
    xs, ys = graphs._curves[(id(graphs.tokens_plot), "tokens/s")].getData()
    assert list(xs) == [1, 2, 3] and list(ys) == pytest.approx([19.5, 20.5, 21.5])
    _x, tts_rtf = graphs._curves[(id(graphs.rtf_plot), "TTS")].getData()
    assert list(tts_rtf) == pytest.approx([0.15] * 3)
    stt_ms = graphs._curves[(id(graphs.stage_plot), "stt")].yData  # log axis: raw data
    assert list(stt_ms) == pytest.approx([600.0])  # the latest of its 3 messages
    _x, mem = graphs._curves[(id(graphs.memory_plot), "cpu")].getData()
    assert mem[0] > 10  # MiB of real RSS
    assert not graphs.redraw()  # nothing new: nothing drawn

    metrics.stage_time("stt", 0.25)
    graphs.update_snapshot(snapshot_from(metrics))
    assert graphs.redraw()
    stt_ms = graphs._curves[(id(graphs.stage_plot), "stt")].yData
    assert list(stt_ms) == pytest.approx([600.0, 250.0])


def test_a_reopened_turn_has_no_bar_until_its_reply_is_heard(qtbot):
    metrics = recorded_metrics(turns=2)
    metrics.reset_turn_work(0, 2, generation=1)  # the user went on speaking
    graphs = GraphsPanel()
    qtbot.addWidget(graphs)
    graphs.update_snapshot(snapshot_from(metrics))
    graphs.redraw()
    assert graphs.latency.numbers == [1]


def test_status_line_names_every_stage_and_the_offline_stack(qtbot):
    status = StageStatus()
    qtbot.addWidget(status)
    snap = snapshot_from(recorded_metrics(1))
    status.show_placements(snap.placements, snap.notes)
    assert "stt: faster-whisper tiny.en on cpu" in status.text
    assert "llm: transformers SmolLM2-135M-Instruct.Q4_1 on cpu" in status.text
    assert status.stack.text() == "Offline stack (bundled models)"
    assert "bundled offline model" in status.stack.toolTip()
    assert short_model("rhasspy/piper-voices:en/en_US/lessac/medium/en_US-lessac-medium.onnx") \
        == "en_US-lessac-medium"


def test_events_from_a_stage_thread_reach_the_conversation(qtbot):
    bridge = EventBridge()
    view = ConversationView()
    qtbot.addWidget(view)
    bridge.user_speaking.connect(view.on_user_speaking)
    bridge.partial_transcript.connect(view.on_partial)
    bridge.final_transcript.connect(view.on_final)
    bridge.reply_text.connect(view.on_reply)
    bridge.turn_cancelled.connect(view.on_cancelled)
    bridge.turn_finished.connect(view.on_finished)
    errors = []
    bridge.engine_error.connect(lambda stage, msg: errors.append((stage, msg)))
    record = dataclasses.replace(recorded_metrics(1).turns()[0], turn_id=7)

    def stage_thread(events):
        for e in events:
            bridge.on_event(e)

    def run(events):
        t = threading.Thread(target=stage_thread, args=(events,))
        t.start()
        t.join()

    run([UserSpeaking(0, 7, True), PartialTranscript(0, 7, "ask not", "what your")])
    qtbot.waitUntil(lambda: view.turns() == [(7, "ask not what your", "")], timeout=2000)
    item = view.item(7)
    assert "<i" in item.user_bubble.text() and "what your" in item.user_bubble.text()
    run([FinalTranscript(0, 7, "Ask not what your country can do for you."),
         ReplyText(0, 7, "I will."), ReplyText(0, 7, "Gladly."), EngineError(0, "tts", "boom")])
    qtbot.waitUntil(lambda: view.turns()[0][2] == "I will. Gladly.", timeout=2000)
    assert view.turns()[0][1] == "Ask not what your country can do for you."
    assert errors == [("tts", "boom")]
    run([TurnFinished(0, record)])
    qtbot.waitUntil(lambda: "replied" in item.reply_caption.text(), timeout=2000)
    assert f"{record.voice_to_voice * 1000:.0f} ms" in item.reply_caption.text()
    run([UserSpeaking(0, 8, True), TurnCancelled(0, 8, "barge-in")])
    qtbot.waitUntil(lambda: view.item(8) is not None, timeout=2000)
    qtbot.waitUntil(lambda: "interrupted" in view.item(8).reply_bubble.text(), timeout=2000)
    assert "You: Ask not what your country can do for you." in view.plain_text()


def test_push_to_talk_passes_speech_only_while_the_key_is_held(jfk_path):
    source = PushToTalkSource(FileSource(jfk_path, realtime=False), enabled=True)
    source.open()
    blocks = [source.read(0.1) for _ in range(100)]  # the first 3.2 s: speech
    assert all(not b.samples.any() for b in blocks)
    assert source.level > 0  # the meter still sees the live microphone
    source.pressed = True
    held = [source.read(0.1) for _ in range(60)]
    assert max(float(np.abs(b.samples).max()) for b in held) > 0.1
    source.enabled = False
    source.pressed = False
    assert source.passing and source.read(0.1).samples.size == 512
    source.close()


def test_lock_meter_reads_a_real_mlx_lock(qtbot):
    from app.performance.meters import LockMeter
    from engine.runtime.mlx_lock import MlxLock

    lock = MlxLock(window_s=5.0)
    meter = LockMeter()
    qtbot.addWidget(meter)
    assert meter.detail.text() == "no MLX stage in use" and not meter.in_use
    held = threading.Event()
    release = threading.Event()

    def llm_step():
        with lock.hold("llm", unit=0):
            held.set()
            release.wait(2)

    t = threading.Thread(target=llm_step, name="parley-u0-llm")
    t.start()
    held.wait(2)
    def stt_step():
        with lock.hold("stt", unit=0):
            pass

    waiter = threading.Thread(target=stt_step, name="parley-u0-stt")
    waiter.start()
    time.sleep(0.1)
    meter.update_lock(lock.snapshot())
    assert meter.in_use and "holder: llm (unit 0) for" in meter.detail.text()
    release.set()
    t.join()
    waiter.join()
    snap = lock.snapshot()
    meter.update_lock(snap)
    assert snap.acquisitions == 2 and snap.contended == 1
    assert "holder: free" in meter.detail.text() and "contended 1 of 2" in meter.detail.text()
    assert meter.bar.value == pytest.approx(snap.utilization) and snap.utilization > 0
    assert meter.value.text() == f"{snap.utilization * 100:.0f} %"
    assert "llm: 1 holds" in meter.stages.text() and "stt: 1 holds" in meter.stages.text()


class _SnapshotSource:
    """Where the window's poller takes snapshots: real EngineSnapshots of a real Metrics
    recorder, noting the thread of every call (the one thing the poller asks an engine)."""

    def __init__(self, stt_depth: int) -> None:
        self.metrics = recorded_metrics()
        self.depths = {"vad": (0, 1), "stt": (stt_depth, 8), "llm": (0, 8), "tts": (0, 16),
                       "sink": (0, 64)}
        self.threads: list[threading.Thread] = []

    def snapshot(self):
        self.threads.append(threading.current_thread())
        return snapshot_from(self.metrics, self.depths)


def test_snapshots_are_taken_off_the_gui_thread_and_the_window_draws_the_latest(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.window.main_window import MainWindow
    from engine.config import EngineConfig

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(EngineConfig(), settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    poller = window.controller.snapshots
    assert window.controller.snapshot() is None and not poller.running  # no engine, no thread
    first = _SnapshotSource(stt_depth=5)
    poller.watch(first)
    qtbot.waitUntil(lambda: window.performance.meters.queues.depths.get("stt") == (5, 8), timeout=3000)
    assert first.threads and {t.name for t in first.threads} == {poller.name}
    assert threading.main_thread() not in first.threads
    # Another engine: the first one's snapshots are neither drawn nor taken any more.
    second = _SnapshotSource(stt_depth=1)
    poller.watch(second)
    assert window.controller.snapshot() is None  # until the new engine's first snapshot
    qtbot.waitUntil(lambda: window.performance.meters.queues.depths.get("stt") == (1, 8), timeout=3000)
    calls = len(first.threads)
    qtbot.wait(300)
    assert len(first.threads) == calls and len(second.threads) >= 2
    # A hidden panel is not drawn: the graphs record the snapshot but draw nothing.
    assert window.tabs.currentWidget() is window.pages["Conversation"]
    assert window.performance.graphs._dirty and window.performance.graphs.latency.numbers == []
    window.close()
    assert not poller.running  # joined at close
