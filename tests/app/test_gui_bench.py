"""The Benchmark tab: two CPU layouts run on a bundled recording off the GUI thread, the
table and the stacked chart drawn, "Use this layout" applied to the desktop settings;
Cancel during a run stops it and leaves no pipeline thread behind."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app.bench.controller import CANCELLED
from app.bench.panel import RESULT_COLUMNS
from app.window.main_window import MainWindow
from app.core.theme import load_stylesheet
from engine.config import EngineConfig


ROOT = Path(__file__).resolve().parents[2]
AUDIO = str(ROOT / "resources" / "audio" / "one_two_three_44k.wav")
OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "off", "llm.max_new_tokens": 16}


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def _choose(combo, device: str) -> None:
    index = combo.findData(device)
    assert index >= 0 and combo.model().item(index).isEnabled(), device
    combo.setCurrentIndex(index)


@pytest.fixture
def window(qtbot, gui_settings):
    QApplication.instance().setStyleSheet(load_stylesheet())
    w = MainWindow(EngineConfig().with_overrides(OFFLINE), gui_settings, autoload=False)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitUntil(lambda: not w.controller.worker.busy, timeout=120_000)  # device discovery
    w.tabs.setCurrentWidget(w.pages["Benchmark"])
    yield w
    w.close()


def _two_cpu_layouts(p) -> None:
    assert len(p.rows) == 2
    for row in p.rows:
        _choose(row.all, "cpu")
    _choose(p.rows[1].stage["stt"], "cpu")  # B differs: it names STT's device itself
    p.set_input(AUDIO)
    p.runs.setValue(1)


@pytest.mark.slow
def test_two_layouts_compared_and_the_fastest_used(window, qtbot, tmp_path):
    p, c = window.bench_panel, window.controller
    assert window.tabs.tabText(window.tabs.indexOf(window.pages["Benchmark"])) == "Benchmark"
    assert p.cancel_button.isEnabled() is False and not p.use_button.isEnabled()
    _two_cpu_layouts(p)
    assert [layout.overrides for layout in p.layouts()] == \
        [{"device": "cpu"}, {"device": "cpu", "stt.device": "cpu"}]
    started = time.perf_counter()
    p.run_button.click()
    assert p.bench.running and not p.run_button.isEnabled() and p.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: not p.bench.running, timeout=600_000)  # measured, or failed
    assert p.table.rowCount() == 2 and len(p.bars) > 0, p.status.text()
    print(f"\nbenchmark of two layouts: {time.perf_counter() - started:.1f} s")
    cells = [[p.table.item(r, col).text() for col in range(len(RESULT_COLUMNS))] for r in range(2)]
    assert cells[0][0].startswith("Layout A") and cells[1][0].startswith("Layout B")
    assert all(cell.endswith(" ms") for row in cells for cell in row[1:3] + row[4:]), cells
    assert cells[0][3] == "1.00×" and cells[1][3].endswith("×")
    assert [r["models_loaded"] for r in p.doc["layouts"]] == [4, 0]  # shared: placed alike
    assert p.status.property("level") == "ok" and p.use_button.isEnabled()
    assert _threads("parley-u") == []

    dirs = os.environ.get("PARLEY_SCREENSHOTS_DIR")
    shot = ROOT / dirs if dirs else tmp_path / "screenshots"
    shot.mkdir(parents=True, exist_ok=True)
    qtbot.wait(200)
    image = window.grab()
    assert (image.width(), image.height()) == (1280, 800)
    assert image.save(str(shot / "bench_panel.png"))
    print(f"screenshot: {shot / 'bench_panel.png'}")

    # "Use this layout": the fastest layout's devices reach the desktop settings.
    with qtbot.waitSignal(c.load_started, timeout=10_000) as loading:
        p.use_button.click()
    config = loading.args[0]
    assert config.device == "cpu"
    assert all(getattr(config, s).device == "cpu" for s in ("stt", "llm", "tts"))
    # While the desktop engine loads them, no benchmark starts (two loads at once).
    p.run_button.click()
    assert not p.bench.running and p.status.text().startswith("Could not run: not now")
    qtbot.waitUntil(lambda: not c.worker.busy, timeout=300_000)
    assert c.config.device == "cpu" and c.engine is not None


@pytest.mark.slow
def test_cancel_stops_the_run_and_joins(window, qtbot):
    p = window.bench_panel
    _two_cpu_layouts(p)
    p.runs.setValue(20)
    failed: list[str] = []
    p.bench.failed.connect(failed.append)
    p.run_button.click()
    # Cancel once the measured rounds have begun (every model loaded, warm-ups done).
    qtbot.waitUntil(lambda: p.status.text().startswith("Step 5 ") or not p.bench.running,
                    timeout=600_000)
    assert p.bench.running, p.status.text()
    p.cancel_button.click()
    assert not p.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: not p.bench.running, timeout=60_000)
    assert failed == [CANCELLED] and p.status.text() == "Cancelled."
    assert p.table.rowCount() == 0 and p.run_button.isEnabled()
    assert _threads("parley-u") == []
