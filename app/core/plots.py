"""pyqtgraph in the current palette's colours, for every plot of the app (the Performance
tab's graphs, the Benchmark tab's chart): the defaults of plots made from now on, and the
background and axes of one plot (call it again on a theme switch)."""

from __future__ import annotations

import pyqtgraph as pg

from app.core import theme
from engine.pipeline.critical_path import Segment

#: The palette colour of each part of a turn's critical path (the Performance tab's bars
#: per turn, the Benchmark tab's bars per layout).
SEGMENT_COLORS = {
    Segment.SILENCE_WAIT: "stage:wait", Segment.STT: "stage:stt", Segment.END_OF_TURN: "stage:eot",
    Segment.LLM_FIRST_TOKEN: "stage:llm", Segment.LLM_FIRST_CLAUSE: "stage:llm_clause",
    Segment.TTS_FIRST_CHUNK: "stage:tts", Segment.COMMIT_WAIT: "stage:commit",
    Segment.LOCK_WAIT: "stage:lock", Segment.QUEUE_WAIT: "stage:queue",
    Segment.ENGINE_OVERHEAD: "stage:overhead", Segment.TO_SPEAKER: "stage:output",
}


def _pg_defaults(pal: theme.Palette) -> None:
    # pyqtgraph's defaults for plots made elsewhere; existing plots restyle themselves.
    pg.setConfigOptions(antialias=True, background=pal.surface, foreground=pal.muted)


_pg_defaults(theme.current())
theme.notifier().changed.connect(_pg_defaults)


def plot_item(w: pg.PlotWidget) -> pg.PlotItem:
    """``w``'s PlotItem (pyqtgraph declares the attribute None before its ``__init__`` sets it)."""
    item = w.getPlotItem()
    if item is None:
        raise TypeError(f"{type(w).__name__} has no PlotItem: its PlotWidget.__init__ did not run")
    return item


def view_box(w: pg.PlotWidget) -> pg.ViewBox:
    """``w``'s ViewBox, where its ranges are set: a PlotWidget forwards ``setXRange`` and
    ``setYRange`` to it at run time, but declares GraphicsView's of other arguments."""
    return plot_item(w).getViewBox()


def style_plot(w: pg.PlotWidget) -> None:
    """The current palette's background and axis colours on ``w``."""
    pal = theme.current()
    w.setBackground(pal.surface)
    for name in ("left", "bottom"):
        axis = plot_item(w).getAxis(name)
        axis.setPen(pal.muted)
        axis.setTextPen(pal.muted)
