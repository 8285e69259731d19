"""The whole app with the real offline models: jfk.flac through a FileSource, the words and
the reply in the conversation view, a bar on the latency graph, memory readings, an event
loop that never stalls, screenshots, and a close that joins every engine thread.

The screenshots go to a temporary folder, so a test run never touches the PNGs tracked in
git; ``make screenshots`` sets ``PARLEY_SCREENSHOTS_DIR=resources/screenshots`` to refresh
them (a relative folder is taken from the repository root).

Models: Silero VAD, faster-whisper tiny.en (bundled), SmolLM2-135M via transformers (its
GGUF is converted once into PARLEY_CACHE_DIR, which conftest.py shares between tests),
Piper joe. Run alone with ``pytest tests/app/test_gui_e2e.py -s`` to see the stall figures.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtWidgets import QApplication

from app.window.main_window import MainWindow
from app.core.theme import load_stylesheet
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EngineConfig
from engine.engine import EngineState
from tests.support.gui import StallMeter
from tests.support.sound_devices import INPUTS, OUTPUTS
from tests.support.transcripts import normalize_spelled

ROOT = Path(__file__).resolve().parents[2]
# The GUI thread never runs engine work, so what remains are third-party calls that hold
# the GIL while models load (import torch, tokenizers, from_pretrained: ~0.2 s each here)
# and plain CPU contention. A load or a stop on the GUI thread would show as seconds.
LOAD_STALL_LIMIT_MS = 1500
TURN_STALL_LIMIT_MS = 250  # the target is < 50 ms
OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "off"}


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("parley-u")]


def screenshots_dir(tmp_path: Path) -> Path:
    """``PARLEY_SCREENSHOTS_DIR`` when set (relative to the repository root), else ``tmp_path``."""
    chosen = os.environ.get("PARLEY_SCREENSHOTS_DIR")
    return ROOT / chosen if chosen else tmp_path / "screenshots"


def _shoot(qtbot, window: MainWindow, tab: int, folder: Path, name: str) -> Path:
    window.tabs.setCurrentIndex(tab)
    qtbot.wait(300)  # two polls: meters and graphs drawn for the visible tab
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    image = window.grab()
    assert (image.width(), image.height()) == (1280, 800)
    assert image.save(str(path))
    return path


@pytest.mark.slow
def test_conversation_with_real_models_in_the_window(qtbot, gui_settings, jfk_path, tmp_path):
    QApplication.instance().setStyleSheet(load_stylesheet())
    config = EngineConfig().with_overrides(OFFLINE)
    window = MainWindow(config, gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    c = window.controller
    states: list[str] = []
    c.state_changed.connect(states.append)
    stall = StallMeter()
    # Startup: the first paint and the device discovery (which imports torch and mlx).
    stall.start()
    qtbot.waitUntil(lambda: not c.worker.busy, timeout=120_000)
    qtbot.wait(200)
    stall.stop()
    startup_stall = stall.max_stall_ms

    # Loading: the progress row shows, the window keeps running its event loop.
    stall.start()
    started = time.perf_counter()
    with qtbot.waitSignal(c.engine_changed, timeout=600_000):
        c.apply(config)
        assert window.load_row.isVisibleTo(window)
    load_s = time.perf_counter() - started
    stall.stop()
    load_stall, load_p99 = stall.max_stall_ms, stall.p99_gap_ms()
    assert not window.load_row.isVisibleTo(window)
    assert "llm: transformers" in window.stage_status.text and "tts: piper" in window.stage_status.text
    assert window.stage_status.stack.text() == "Offline stack (bundled models)"
    assert "stt: faster-whisper Whisper tiny.en on cpu" in window.stage_status.text
    assert "bundled offline models" in window.stage_status.stack.toolTip()
    assert window.offers.models_button.isVisibleTo(window)  # the hub models that would replace them
    assert window.listen_button.isEnabled()

    # One run of the recording, unpaced, to a file sink.
    trailing = (config.vad.min_silence_ms + config.turns.reopen_grace_ms) / 1000 + 0.5
    source = FileSource(jfk_path, realtime=False, trailing_silence_s=trailing)
    sink = FileSink(None, realtime=False)
    states.clear()
    stall.start()
    started = time.perf_counter()
    c.start_with([source], [sink])
    qtbot.waitUntil(lambda: "listening" in states and c.state == "ready", timeout=300_000)
    run_s = time.perf_counter() - started
    stall.stop()
    turn_stall, turn_p99 = stall.max_stall_ms, stall.p99_gap_ms()
    print(f"\nGUI stall: startup {startup_stall:.1f} ms max; "
          f"loading {load_stall:.1f} ms max (p99 gap {load_p99:.1f} ms, load {load_s:.1f} s); "
          f"turn {turn_stall:.1f} ms max (p99 gap {turn_p99:.1f} ms, run {run_s:.1f} s)")

    said = normalize_spelled(" ".join(user for _t, user, _r in window.conversation.turns()))
    assert "ask not what your country can do for you" in said
    replies = [reply for _t, _u, reply in window.conversation.turns() if reply]
    assert replies and len(replies[0].split()) >= 2
    assert sink.audio.size > sink.sample_rate * 0.5  # the reply was spoken
    assert window.banner.isHidden(), window.banner.label.text()

    # Meters on the conversation tab, graphs on the performance tab.
    shots = screenshots_dir(tmp_path)
    main_png = _shoot(qtbot, window, 0, shots, "main_window.png")
    cpu = window.performance.meters.memory.readings["cpu"]
    assert cpu.used_bytes > 100 * 2**20 and cpu.total_bytes > cpu.used_bytes
    _shoot(qtbot, window, 1, shots, "performance.png")
    assert window.performance.graphs.latency.numbers, "no bar on the latency graph"
    finished = [t for t in c.engine.metrics.turns() if t.voice_to_voice is not None]
    graphs = window.performance.graphs
    assert graphs.latency.totals_ms[-1] == pytest.approx(finished[-1].voice_to_voice * 1000)
    settings_png = _shoot(qtbot, window, 2, shots, "settings_panel.png")
    assert main_png.stat().st_size > 20_000 and settings_png.stat().st_size > 20_000
    window.tabs.setCurrentIndex(0)

    assert stall.PERIOD_MS == 5
    assert load_stall < LOAD_STALL_LIMIT_MS and turn_stall < TURN_STALL_LIMIT_MS

    # Listen / Stop on the sound card (JACK dummy or ALSA null in CI).
    if INPUTS and OUTPUTS:
        window.listen_button.click()
        qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)
        assert window.listen_button.text() == "Stop" and c.mode == "mic"
        qtbot.wait(300)
        assert c.snapshot().state is EngineState.RUNNING
        window.listen_button.click()
        qtbot.waitUntil(lambda: c.state == "ready", timeout=30_000)
        assert window.listen_button.text() == "Listen" and _engine_threads() == []
        assert window.banner.isHidden(), window.banner.label.text()

    # Apply of a runtime setting: the same engine and models, the setting in force at once.
    old = c.engine
    old_models = dict(old.models)
    started = time.perf_counter()
    with qtbot.waitSignal(c.applied, timeout=120_000):
        window.panel.live.setChecked(True)
        window.panel.apply_button.click()
    apply_s = time.perf_counter() - started
    assert c.engine is old and c.config.turns.live_transcription
    assert old.config.turns.live_transcription
    assert all(c.engine.models[s] is old_models[s] for s in ("vad", "stt", "llm", "tts"))
    assert gui_settings.value("turns/live_transcription") == "true"
    print(f"apply of a runtime setting: {apply_s * 1000:.0f} ms")

    # Close while a paced run is in flight: the engine stops and its threads are joined.
    paced = FileSource(jfk_path, realtime=True, trailing_silence_s=trailing)
    shown = len(window.conversation.turns())
    c.start_with([paced], [FileSink(None, realtime=True)])
    qtbot.waitUntil(lambda: c.state == "listening", timeout=30_000)
    # Progressive transcription: words appear while the recording is still playing.
    qtbot.waitUntil(lambda: len(window.conversation.turns()) > shown
                    and bool(window.conversation.turns()[-1][1]), timeout=15_000)
    assert window.conversation.turns()[-1][2] == ""  # still speaking: words, no reply yet
    assert _engine_threads()
    engine = c.engine
    started = time.perf_counter()
    window.close()
    close_s = time.perf_counter() - started
    print(f"close with a running pipeline: {close_s * 1000:.0f} ms")
    assert window.shutdown_stuck == []
    assert engine.threads_alive() == [] and _engine_threads() == []
    # Every finished turn of the desktop conversation was stored in the history.
    from engine.history.store import HistoryStore

    store = HistoryStore()  # the test session's PARLEY_DATA_DIR (tests/conftest.py)
    try:
        stored = [t.transcript for c in store.conversations(limit=None)
                  for t in store.conversation(c.id).turns]
    finally:
        store.close()
    assert any("ask not what your country" in normalize_spelled(t) for t in stored), stored
    assert engine.state is EngineState.STOPPED and not engine.models
    assert close_s < 5.0


def test_screenshots_go_to_a_temporary_folder_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("PARLEY_SCREENSHOTS_DIR", raising=False)
    assert screenshots_dir(tmp_path) == tmp_path / "screenshots"
    monkeypatch.setenv("PARLEY_SCREENSHOTS_DIR", "resources/screenshots")  # what make screenshots sets
    assert screenshots_dir(tmp_path) == ROOT / "resources" / "screenshots"
    monkeypatch.setenv("PARLEY_SCREENSHOTS_DIR", str(tmp_path / "elsewhere"))
    assert screenshots_dir(tmp_path) == tmp_path / "elsewhere"
