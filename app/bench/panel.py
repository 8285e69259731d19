"""The Benchmark tab: compare device layouts (``parley-cli bench --layouts``) from the app.

Layout rows, each a device dropdown for all stages and one per stage (stt, llm, tts),
filled from the discovered devices as the Settings tab fills its own (a device that is
not available, or that the stage's backend does not run on, is listed but disabled, its
tooltip saying why); an input (a bundled recording or the user's file); the rounds; Run
and Cancel with a progress line. The result: a table (voice-to-voice p50/p95, the ratio to
the first layout, STT/LLM/TTS p50) and a stacked bar chart of the stage latencies per
layout. "Use this layout" emits the fastest layout's ``{stage}.device`` settings.

Everything that loads or runs is done by the BenchController, off the GUI thread.
"""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFileDialog, QGridLayout, QGroupBox, QHBoxLayout, QLabel,
                               QPushButton, QSpinBox, QTableWidgetItem, QVBoxLayout, QWidget)

from app.bench.controller import CANCELLED, BenchController
from app.core import theme
from app.core.compute_devices import add_device_items
from app.core.plots import SEGMENT_COLORS, style_plot, view_box
from app.core.resources import resource_path
from app.core.widgets import data_table, set_row
from engine.backends import BackendRegistry
from engine.bench.layouts import Layout
from engine.measures import Figure
from engine.pipeline.critical_path import Segment, median_path

AUTO = "auto"
SAME = ""  # a stage dropdown's "as for all stages"
BENCH_STAGES = ("stt", "llm", "tts")
BUNDLED = ("one_two_three_44k.wav", "jfk.flac")
CHOOSE = "choose"
RESULT_COLUMNS = ("Layout", "V2V p50", "V2V p95", "vs first",
                  "STT p50", "LLM p50", "TTS p50")
MAX_LAYOUTS = 6


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f} ms"


def _p50(row: dict, figure: Figure, key: str = "p50") -> float | None:
    return (row["summary"].get(figure.value) or {}).get(key)


class LayoutRow:
    """One layout: its name and a dropdown for all stages and each stage."""

    def __init__(self, name: str) -> None:
        self.name = QLabel(name)
        self.all = QComboBox()
        self.all.setAccessibleName(f"{name}: device for all stages")
        self.stage = {s: QComboBox() for s in BENCH_STAGES}
        for s, combo in self.stage.items():
            combo.setAccessibleName(f"{name}: {s} device")
        self.remove = QPushButton("Remove")
        self.remove.setAccessibleName(f"Remove {name}")

    def widgets(self) -> list[QWidget]:
        return [self.name, self.all, *self.stage.values(), self.remove]

    def overrides(self) -> dict[str, str]:
        """The layout's settings: ``device`` always, ``{stage}.device`` where chosen."""
        out = {"device": self.all.currentData() or AUTO}
        for s, combo in self.stage.items():
            if combo.currentData():
                out[f"{s}.device"] = combo.currentData()
        return out


class BenchPanel(QWidget):
    """Layouts, input, Run/Cancel; the comparison as a table and a chart."""

    use_layout = Signal(object)  # {"device": ..., "stt.device": ..., ...}

    def __init__(self, bench: BenchController, config=None, parent: QWidget | None = None) -> None:
        """``config()``: the desktop EngineConfig, whose backends decide what each stage
        runs on (for the dropdowns' disabled entries)."""
        super().__init__(parent)
        self.bench = bench
        self._config = config
        self.devices: list = []
        self.backends = BackendRegistry()
        self.rows: list[LayoutRow] = []
        self._numbered = 0
        self.doc: dict | None = None
        self.best: dict | None = None  # the fastest row of the last result
        self._build()
        self.add_layout({"device": "cpu"})
        self.add_layout({"device": AUTO})
        bench.running_changed.connect(self._running_changed)
        bench.progress.connect(self._progress)
        bench.finished.connect(self.show_result)
        bench.failed.connect(self._failed)
        self._running_changed(bench.running)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(12)
        box = QGroupBox("Layouts (which device each stage runs on)")
        self.grid = QGridLayout(box)
        self.grid.setHorizontalSpacing(10)
        for col, text in enumerate(("Layout", "All stages", "STT", "LLM", "TTS")):
            self.grid.addWidget(QLabel(text), 0, col)
        self.add_button = QPushButton("Add layout")
        self.add_button.setAccessibleName("Add layout")
        self.add_button.clicked.connect(lambda: self.add_layout())
        outer.addWidget(box)
        self._rows_box = box
        controls = QHBoxLayout()
        self.input = QComboBox()
        self.input.setObjectName("benchInput")
        self.input.setAccessibleName("Input recording")
        for name in BUNDLED:
            self.input.addItem(f"{name} (bundled)", str(resource_path("audio", name)))
        self.input.addItem("Choose file…", CHOOSE)
        self.input.activated.connect(self._input_chosen)
        self.runs = QSpinBox()
        self.runs.setObjectName("benchRuns")
        self.runs.setAccessibleName("Rounds")
        self.runs.setRange(1, 50)
        self.runs.setValue(3)
        self.runs.setToolTip("Measured rounds; the layouts take turns in each (A B A B …)")
        self.run_button = QPushButton("Run")
        self.run_button.setObjectName("primary")
        self.run_button.setAccessibleName("Run the benchmark")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setAccessibleName("Cancel the benchmark")
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QLabel("Choose layouts and press Run.")
        self.status.setObjectName("panelMessage")
        self.status.setAccessibleName("Benchmark progress")
        self.status.setWordWrap(True)
        controls.addWidget(self.add_button)
        controls.addSpacing(12)
        controls.addWidget(QLabel("Input"))
        controls.addWidget(self.input, 1)
        controls.addWidget(QLabel("Rounds"))
        controls.addWidget(self.runs)
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        outer.addLayout(controls)
        outer.addWidget(self.status)
        results = QHBoxLayout()
        left = QVBoxLayout()
        self.table = data_table(RESULT_COLUMNS, "benchResults", "Benchmark results",
                            len(RESULT_COLUMNS) - 1)
        self.use_button = QPushButton("Use this layout")
        self.use_button.setAccessibleName("Use the fastest layout")
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self._use)
        v2v_header = QTableWidgetItem(RESULT_COLUMNS[1])
        v2v_header.setToolTip("voice-to-voice: end of speech to the first reply audio")
        self.table.setHorizontalHeaderItem(1, v2v_header)
        left.addWidget(self.table, 1)
        left.addWidget(self.use_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.chart = pg.PlotWidget()
        self.chart.setObjectName("benchChart")
        self.chart.setAccessibleName("Latency per layout chart")
        style_plot(self.chart)
        theme.notifier().changed.connect(self._restyle_chart)
        self.chart.setLabel("left", "ms after the end of speech (p50)")
        self.chart.showGrid(y=True, alpha=0.3)
        self.chart.setMouseEnabled(False, False)
        self.legend = self.chart.addLegend(offset=(10, 5), colCount=2)
        self.bars: list[pg.BarGraphItem] = []
        results.addLayout(left, 1)
        results.addWidget(self.chart, 1)
        outer.addLayout(results, 1)

    def _restyle_chart(self, _palette) -> None:
        """A theme switch: the chart's background and axes in the new palette."""
        style_plot(self.chart)

    # ------------------------------------------------------------------ layout rows
    def add_layout(self, overrides: dict[str, str] | None = None) -> LayoutRow:
        self._numbered += 1
        row = LayoutRow(f"Layout {chr(ord('A') + (self._numbered - 1) % 26)}")
        row.remove.clicked.connect(lambda: self.remove_layout(row))
        self.rows.append(row)
        self._fill(row, overrides or {"device": AUTO})
        self._regrid()
        return row

    def remove_layout(self, row: LayoutRow) -> None:
        if len(self.rows) <= 1 or row not in self.rows:
            return
        self.rows.remove(row)
        for w in row.widgets():
            self.grid.removeWidget(w)
            w.deleteLater()
        self._regrid()

    def _regrid(self) -> None:
        for r, row in enumerate(self.rows, start=1):
            for c, w in enumerate(row.widgets()):
                self.grid.addWidget(w, r, c)
            row.remove.setEnabled(len(self.rows) > 1 and not self.bench.running)
        self.add_button.setEnabled(len(self.rows) < MAX_LAYOUTS and not self.bench.running)

    def set_devices(self, devices) -> None:
        """Discovery's devices (remote servers left out): refill every dropdown."""
        self.devices = [d for d in devices if d.device.kind != "remote"]
        for row in self.rows:
            self._fill(row, row.overrides())

    def _kinds(self, stage: str) -> tuple[set[str] | None, str]:
        config = self._config() if self._config else None
        name = config.stage_config(stage).backend if config is not None else AUTO
        try:
            if name and name != AUTO:
                spec = self.backends.get(stage, name)
                return set(spec.devices), spec.name
            specs = [s for s in self.backends.specs(stage) if s.missing_package() is None]
        except Exception:  # noqa: BLE001 - an unknown backend: nothing is ruled out here
            return None, ""
        return {k for s in specs for k in s.devices}, f"no installed {stage} backend"

    def _fill(self, row: LayoutRow, overrides: dict[str, str]) -> None:
        self._fill_combo(row.all, None, overrides.get("device", AUTO))
        for s, combo in row.stage.items():
            self._fill_combo(combo, s, overrides.get(f"{s}.device", SAME))

    def _fill_combo(self, combo: QComboBox, stage: str | None, wanted: str) -> None:
        """As the Settings tab's device dropdowns: impossible devices disabled, with why."""
        combo.blockSignals(True)
        combo.clear()
        if stage is None:
            combo.addItem("auto — best available", AUTO)
        else:
            combo.addItem("as for all stages", SAME)
        kinds, who = self._kinds(stage) if stage else (None, "")
        add_device_items(combo, self.devices, kinds, who)
        index = combo.findData(wanted)
        if index < 0:
            combo.addItem(wanted if not self.devices else f"{wanted} (not found)", wanted)
            index = combo.count() - 1
        combo.setCurrentIndex(index)
        combo.blockSignals(False)

    def layouts(self) -> list[Layout]:
        return [Layout(row.name.text(), row.overrides()) for row in self.rows]

    # ------------------------------------------------------------------ input
    def _input_chosen(self, index: int) -> None:
        if self.input.itemData(index) != CHOOSE:
            return
        path, _ = QFileDialog.getOpenFileName(self, "A recording to benchmark", "",
                                              "Audio (*.wav *.flac *.mp3 *.ogg);;All files (*)")
        if path:
            self.set_input(path)
        else:
            self.input.setCurrentIndex(0)

    def set_input(self, path: str) -> None:
        """Benchmark on ``path`` (a bundled recording's path, or any file)."""
        index = self.input.findData(str(path))
        if index < 0:
            self.input.insertItem(self.input.count() - 1, Path(path).name, str(path))
            index = self.input.count() - 2
        self.input.setCurrentIndex(index)

    # ------------------------------------------------------------------ run / cancel
    def run(self) -> None:
        self.doc = self.best = None
        self.table.setRowCount(0)
        self._clear_chart()
        self.use_button.setEnabled(False)
        self._message("Starting…", "info")
        self.bench.start(self.layouts(), [self.input.currentData()], self.runs.value())

    def cancel(self) -> None:
        if self.bench.running:
            self.bench.cancel()
            self.cancel_button.setEnabled(False)
            self._message("Cancelling after the current step…", "info")

    def _running_changed(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for w in (self.input, self.runs):
            w.setEnabled(not running)
        for row in self.rows:
            for combo in (row.all, *row.stage.values()):
                combo.setEnabled(not running)
        self._regrid()

    def _progress(self, step: int, steps: int, text: str) -> None:
        if not self.bench._stop.is_set():
            self._message(f"Step {step} of {steps}: {text}…", "info")

    def _failed(self, message: str) -> None:
        if message == CANCELLED:
            self._message("Cancelled.", "info")
        else:
            self._message(f"Could not run: {message}", "error")

    def _message(self, text: str, level: str) -> None:
        self.status.setProperty("level", level)
        self.status.setText(text)
        self.status.style().unpolish(self.status)
        self.status.style().polish(self.status)

    # ------------------------------------------------------------------ results
    def show_result(self, doc: dict) -> None:
        """Draw a ``bench --layouts --json`` document: the table and the chart."""
        self.doc = doc
        rows = doc["layouts"]
        self.table.setRowCount(len(rows))
        v2v = Figure.VOICE_TO_VOICE_S
        timed = [(p50, r) for r in rows if (p50 := _p50(r, v2v)) is not None]
        self.best = min(timed, key=lambda timed_row: timed_row[0])[1] if timed else None
        for i, r in enumerate(rows):
            ratio = r["vs_first"]["ratio"]
            name = r["layout"] + ("  ★ fastest" if r is self.best else "")
            set_row(self.table, i, [
                name, _ms(_p50(r, v2v)), _ms(_p50(r, v2v, "p95")),
                "—" if ratio is None else f"{ratio:.2f}×",
                _ms(_p50(r, Figure.STT_COMPUTE_S)), _ms(_p50(r, Figure.LLM_FIRST_CHUNK_COMPUTE_S)),
                _ms(_p50(r, Figure.TTS_FIRST_COMPUTE_S))],
                {0: ", ".join(f"{k}={v}" for k, v in r["settings"].items())})
        self._draw(rows)
        self.use_button.setEnabled(self.best is not None)
        if self.best is not None:
            self.use_button.setText(f"Use this layout ({self.best['layout']})")
        self._message(f"Done: {len(rows)} layouts, {doc['runs']} round(s).", "ok")

    def _clear_chart(self) -> None:
        for item in self.bars:
            self.chart.removeItem(item)
        self.bars = []
        self.legend.clear()

    def _draw(self, rows: list[dict]) -> None:
        self._clear_chart()
        xs = list(range(len(rows)))
        bottoms = [0.0] * len(rows)
        # The lab's own stages (engine.pipeline.critical_path), as its PNG draws them: the
        # critical path of each layout's median turn, adding up to its voice-to-voice.
        paths = [median_path([t for run in r["turns"] for t in run]) for r in rows]
        for segment in Segment:
            heights = [(path[segment] if path else 0.0) * 1000 for path in paths]
            if not any(heights):
                continue  # a part no layout had (no lock waits...): no bar, no legend entry
            bar = pg.BarGraphItem(x=xs, y0=bottoms, height=heights, width=0.6,
                                  brush=theme.resolve(SEGMENT_COLORS[segment]), pen=None)
            self.chart.addItem(bar)
            self.legend.addItem(bar, segment.label)
            self.bars.append(bar)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        self.chart.getAxis("bottom").setTicks([[(x, r["layout"]) for x, r in zip(xs, rows)]])
        view_box(self.chart).setXRange(-0.6, len(rows) - 0.4)
        view_box(self.chart).setYRange(0, max(bottoms + [1.0]) * 1.5)  # room for the legend

    def _use(self) -> None:
        if self.best is None:
            return
        settings = dict(self.best["settings"])
        every = settings.get("device", AUTO)
        overrides = {"device": every}
        for s in BENCH_STAGES:
            overrides[f"{s}.device"] = settings.get(f"{s}.device", every)
        self.use_layout.emit(overrides)
