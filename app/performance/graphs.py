"""Live performance graphs (pyqtgraph): voice-to-voice per turn as stacked stage bars,
per-stage latency over time, LLM tokens/s, STT and TTS real-time factor, and memory per
device over time. Colours come from the current theme palette; a theme switch restyles
every plot (``GraphsPanel.restyle``).

``update_snapshot`` runs on every poll and only records data; ``redraw`` draws what changed
and the window calls it only while the graphs are visible.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QWidget

from app.core import theme
from app.core.plots import SEGMENT_COLORS, plot_item, style_plot, view_box
from engine.measures import Figure
from engine.pipeline.critical_path import Segment

if TYPE_CHECKING:
    from engine.pipeline.metrics import TurnRecord

#: The parts of a turn's critical path (``engine.pipeline.critical_path``), in path order.
SEGMENTS = tuple(Segment)
TARGET_S = 0.8  # the design's voice-to-voice budget
BAR_TURNS = 12  # turns shown in the latency bars
HISTORY_S = 180.0  # seconds of time series kept and shown
MEMORY_EVERY_S = 0.5


def turn_segments(record) -> list[float] | None:
    """Seconds per SEGMENTS entry along the turn's critical path, summing to its
    voice-to-voice latency; None for a turn without one (cancelled, no reply heard)."""
    path = record.critical_path()
    return None if path is None else [path[segment] for segment in SEGMENTS]


def _legend() -> list[tuple[str, str]]:
    return [(segment.label, SEGMENT_COLORS[segment]) for segment in SEGMENTS]


def set_title(w: pg.PlotWidget, title: str, legend: Sequence[tuple[str, str]] = ()) -> None:
    """A bold title followed by a legend of coloured squares, above the plot area, where
    it never covers the data. Legend colours are palette references (see theme.resolve)."""
    pal = theme.current()
    keys = "&nbsp;&nbsp;&nbsp;".join(
        f"<span style='color:{theme.resolve(color)}'>&#9632;</span>&nbsp;"
        f"<span style='color:{pal.muted}'>{name}</span>"
        for name, color in legend)
    sep = "&nbsp;&nbsp;&nbsp;&nbsp;&nbsp;" if legend else ""
    plot_item(w).setTitle(f"<span style='color:{pal.text};font-size:10pt;font-weight:600'>{title}</span>"
                             f"{sep}<span style='font-size:9pt'>{keys}</span>")


def _plot(title: str, left: str, bottom: str) -> pg.PlotWidget:
    w = pg.PlotWidget()
    w.setObjectName("graph")
    style_plot(w)
    item = plot_item(w)
    set_title(w, title)
    item.setLabel("left", left)
    item.setLabel("bottom", bottom)
    item.showGrid(x=False, y=True, alpha=0.15)
    item.setMenuEnabled(False)
    item.hideButtons()
    w.setMouseEnabled(x=False, y=False)
    w.setMinimumHeight(150)
    return w


class LatencyBars(pg.PlotWidget):
    """Voice-to-voice latency of the recent turns, stacked by stage, with the target line."""

    def __init__(self) -> None:
        super().__init__()
        item = plot_item(self)
        style_plot(self)
        set_title(self, "Voice-to-voice latency per turn", _legend())
        item.setLabel("left", "ms after you stopped")
        item.setLabel("bottom", "turn")
        item.showGrid(x=False, y=True, alpha=0.15)
        item.setMenuEnabled(False)
        item.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.setMinimumHeight(170)
        self.bars: dict[Segment, pg.BarGraphItem] = {}
        for segment in SEGMENTS:
            color = theme.resolve(SEGMENT_COLORS[segment])
            bar = pg.BarGraphItem(x=[], height=[], y0=[], width=0.6, brush=color, pen=pg.mkPen(None))
            self.addItem(bar)
            self.bars[segment] = bar
        bad = theme.current().bad
        self.target = pg.InfiniteLine(TARGET_S * 1000, angle=0,
                                      pen=pg.mkPen(bad, width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
                                      label=f"target {TARGET_S:.1f} s",
                                      labelOpts={"position": 0.97, "color": bad,
                                                 "anchors": [(1, 1), (1, 1)]})
        self.addItem(self.target)
        self.numbers: list[int] = []  # the turns drawn, numbered across engines
        self.totals_ms: list[float] = []
        view_box(self).setYRange(0, 1000)
        view_box(self).setXRange(0.4, BAR_TURNS + 0.6)

    def restyle(self) -> None:
        """Redraw in the current palette."""
        style_plot(self)
        set_title(self, "Voice-to-voice latency per turn", _legend())
        for segment, bar in self.bars.items():
            bar.setOpts(brush=theme.resolve(SEGMENT_COLORS[segment]))
        bad = theme.current().bad
        self.target.setPen(pg.mkPen(bad, width=1, style=pg.QtCore.Qt.PenStyle.DashLine))
        self.target.label.setColor(bad)

    def set_turns(self, turns) -> None:
        """Draw the last BAR_TURNS of ``(number, TurnRecord)`` that have a voice-to-voice."""
        rows = [(n, seg) for n, t in turns if (seg := turn_segments(t)) is not None][-BAR_TURNS:]
        self.numbers = [n for n, _seg in rows]
        xs = list(range(1, len(rows) + 1))
        base = [0.0] * len(rows)
        for i, segment in enumerate(SEGMENTS):
            heights = [seg[i] * 1000 for _tid, seg in rows]
            self.bars[segment].setOpts(x=xs, height=heights, y0=list(base), width=0.6)
            base = [b + h for b, h in zip(base, heights)]
        self.totals_ms = base
        top = max([TARGET_S * 1000, *base]) * 1.15
        view_box(self).setYRange(0, top, padding=0)
        view_box(self).setXRange(0.4, max(BAR_TURNS, len(rows)) + 0.6, padding=0)
        plot_item(self).getAxis("bottom").setTicks([[(x, f"#{n}") for x, n in zip(xs, self.numbers)]])


class TimeSeries:
    """Named series of (t, value) for the last HISTORY_S seconds."""

    def __init__(self) -> None:
        self.series: dict[str, deque[tuple[float, float]]] = {}

    def add(self, name: str, t: float, value: float) -> None:
        """Append a point to ``name``; drop points older than HISTORY_S."""
        points = self.series.setdefault(name, deque())
        points.append((t, value))
        while points and points[0][0] < t - HISTORY_S:
            points.popleft()

    def arrays(self, name: str) -> tuple[list[float], list[float]]:
        """The series' times and values, for ``setData``."""
        points = self.series.get(name, ())
        return [p[0] for p in points], [p[1] for p in points]


class GraphsPanel(QWidget):
    """All performance graphs in a grid."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(10)
        self.latency = LatencyBars()
        self.stage_plot = _plot("Stage compute time per message", "ms (log scale)", "seconds")
        self.memory_plot = _plot("Memory per device", "MiB", "seconds")
        self.tokens_plot = _plot("LLM decode speed per turn", "tokens/s", "turn")
        self.rtf_plot = _plot("Real-time factor per turn (below 1 is faster than real time)", "RTF", "turn")
        plot_item(self.stage_plot).setLogMode(y=True)
        self._titles = {id(self.stage_plot): "Stage compute time per message",
                        id(self.memory_plot): "Memory per device",
                        id(self.rtf_plot): "Real-time factor per turn (below 1 is faster than real time)"}
        self._legend_items: dict[int, list[tuple[str, str]]] = {k: [] for k in self._titles}
        grid.addWidget(self.latency, 0, 0, 1, 2)
        grid.addWidget(self.stage_plot, 1, 0)
        grid.addWidget(self.memory_plot, 1, 1)
        grid.addWidget(self.tokens_plot, 2, 0)
        grid.addWidget(self.rtf_plot, 2, 1)
        grid.setRowStretch(0, 5)
        grid.setRowStretch(1, 4)
        grid.setRowStretch(2, 4)
        self._curves: dict[tuple[int, str], pg.PlotDataItem] = {}
        self._curve_refs: dict[tuple[int, str], str] = {}  # each curve's palette colour
        self.stage_times = TimeSeries()
        self.memory = TimeSeries()
        self._counts: dict[str, int] = {}
        self._t0: float | None = None
        self._last_memory_t = -1e9
        # Turns of every engine this window had, numbered in order: an Apply starts a new
        # engine whose turn ids begin at 1 again.
        self._epoch = 0
        self._history: dict[tuple[int, int, int], tuple[int, TurnRecord]] = {}
        self._next_number = 1
        self._dirty = True
        for plot, top in ((self.memory_plot, 1024), (self.tokens_plot, 40), (self.rtf_plot, 1.2)):
            view_box(plot).setYRange(0, top, padding=0)
        for plot in (self.tokens_plot, self.rtf_plot):
            view_box(plot).setXRange(1, 10)
        for plot in (self.stage_plot, self.memory_plot):
            view_box(plot).setXRange(0, 30)
        self._rtf_line = pg.InfiniteLine(1.0, angle=0)
        self.rtf_plot.addItem(self._rtf_line)
        self.restyle()
        theme.notifier().changed.connect(self._on_theme)

    def plots(self) -> tuple[pg.PlotWidget, ...]:
        """Every plot of the panel."""
        return (self.latency, self.stage_plot, self.memory_plot, self.tokens_plot, self.rtf_plot)

    def background_color(self) -> str:
        """The plots' background now (``#rrggbb``)."""
        return self.latency.backgroundBrush().color().name()

    def _on_theme(self, _palette) -> None:
        self.restyle()

    def restyle(self) -> None:
        """Apply the current palette to every plot, title, legend and curve."""
        self.latency.restyle()
        titles = {id(self.tokens_plot): "LLM decode speed per turn", **self._titles}
        for plot in self.plots()[1:]:
            style_plot(plot)
            set_title(plot, titles[id(plot)], self._legend_items.get(id(plot), []))
        for key, curve in self._curves.items():
            color = theme.resolve(self._curve_refs[key])
            curve.setPen(pg.mkPen(color, width=2))
            if curve.opts.get("symbol") is not None:
                curve.setSymbolBrush(color)
        self._rtf_line.setPen(pg.mkPen(theme.current().muted, width=1,
                                       style=pg.QtCore.Qt.PenStyle.DashLine))

    # ------------------------------------------------------------------ data
    def update_snapshot(self, snap) -> None:
        """Record what the snapshot adds to the time series (cheap; runs while hidden)."""
        if self._t0 is None:
            self._t0 = snap.t
        t = snap.t - self._t0
        for s in snap.stages:
            # A zero-time message (a hand-off) has no place on a log axis.
            if s.count > self._counts.get(s.name, 0) and s.last_s:
                self.stage_times.add(s.name, t, s.last_s * 1000)
                self._dirty = True
            self._counts[s.name] = s.count
        if t - self._last_memory_t >= MEMORY_EVERY_S:
            self._last_memory_t = t
            for r in snap.memory:
                self.memory.add(r.device, t, r.used_bytes / 2**20)
            self._dirty = True
        for record in snap.turns:
            key = (self._epoch, record.unit, record.turn_id)
            known = self._history.get(key)
            if known is None:
                self._history[key] = (self._next_number, record)
                self._next_number += 1
                self._dirty = True
            elif known[1] != record:
                self._history[key] = (known[0], record)
                self._dirty = True
        while len(self._history) > 200:
            del self._history[next(iter(self._history))]

    def turns(self) -> list[tuple[int, TurnRecord]]:
        """``(number, TurnRecord)`` of every turn kept, oldest first."""
        return list(self._history.values())

    def new_engine(self) -> None:
        """A new engine: its stage counts and turn ids start again."""
        self._counts.clear()
        self._epoch += 1

    # ------------------------------------------------------------------ drawing
    def redraw(self) -> bool:
        """Draw what changed since the last redraw; True if anything was drawn."""
        if not self._dirty:
            return False
        self._dirty = False
        turns = self.turns()
        finished = [(n, t) for n, t in turns if t.finished and not t.cancelled]
        self.latency.set_turns(turns)
        for name in self.stage_times.series:
            self._curve(self.stage_plot, name, f"stage:{name}",
                        symbol=True).setData(*self.stage_times.arrays(name))
        for i, name in enumerate(self.memory.series):
            self._curve(self.memory_plot, name, f"series:{i}").setData(
                *self.memory.arrays(name))
        if self._t0 is not None and self._counts:
            now = max((pts[-1][0] for ts in (self.stage_times, self.memory)
                       for pts in ts.series.values() if pts), default=0.0)
            for plot in (self.stage_plot, self.memory_plot):
                view_box(plot).setXRange(max(0.0, now - HISTORY_S), max(now, 30.0), padding=0.02)
        peak = max((v for name in self.memory.series for v in self.memory.arrays(name)[1]), default=0.0)
        view_box(self.memory_plot).setYRange(0, max(peak * 1.2, 64), padding=0)
        rates = [(n, rate) for n, t in finished if (rate := t.value(Figure.LLM_TOKENS_PER_S))]
        self._curve(self.tokens_plot, "tokens/s", "stage:llm", symbol=True).setData(
            [r[0] for r in rates], [r[1] for r in rates])
        view_box(self.tokens_plot).setYRange(0, max([40.0, *(r[1] * 1.25 for r in rates)]), padding=0)
        top = 1.2
        for name, figure in (("STT", Figure.STT_RTF), ("TTS", Figure.TTS_RTF)):
            rows = [(n, value) for n, t in finished if (value := t.value(figure)) is not None]
            top = max([top, *(r[1] * 1.2 for r in rows)])
            self._curve(self.rtf_plot, name, f"stage:{name.lower()}", symbol=True).setData(
                [r[0] for r in rows], [r[1] for r in rows])
        view_box(self.rtf_plot).setYRange(0, top, padding=0)
        last = max([10, *(n for n, _t in finished)])
        for plot in (self.tokens_plot, self.rtf_plot):
            view_box(plot).setXRange(max(1, last - 29), last, padding=0.03)
        return True

    def _curve(self, plot: pg.PlotWidget, name: str, ref: str, symbol: bool = False) -> pg.PlotDataItem:
        """The curve ``name`` of ``plot``, made on first use in the palette colour ``ref``."""
        key = (id(plot), name)
        curve = self._curves.get(key)
        if curve is None:
            color = theme.resolve(ref)
            curve = plot.plot([], [], pen=pg.mkPen(color, width=2), name=None,
                              symbol="o" if symbol else None, symbolSize=5,
                              symbolBrush=color, symbolPen=pg.mkPen(None))
            self._curves[key] = curve
            self._curve_refs[key] = ref
            legend = self._legend_items.get(id(plot))
            if legend is not None:
                legend.append((name, ref))
                set_title(plot, self._titles[id(plot)], legend)
        return curve
