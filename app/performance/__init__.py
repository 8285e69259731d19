"""The live meters and the performance graphs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.core.window_api import WindowApi
    from app.performance.graphs import GraphsPanel
    from app.performance.meters import MetersPanel


@dataclass(frozen=True)
class Performance:
    """What ``install`` made: the meters panel and the graphs panel."""

    meters: MetersPanel
    graphs: GraphsPanel


def install(window: WindowApi, beside: Callable[[QWidget], object]) -> Performance:
    """The live meters, put where ``beside(widget)`` places them (beside the
    conversation), and the Performance tab's graphs, both fed by ``window``'s snapshots:
    the graphs record every new one and draw only while shown, the meters show the latest
    while their tab is the current one."""
    # Imported here, not at the top: importing one module of the feature (the meters)
    # does not build the graphs (pyqtgraph).
    from PySide6.QtWidgets import QFrame, QScrollArea

    from app.performance.graphs import GraphsPanel
    from app.performance.meters import MetersPanel

    meters = MetersPanel()
    scroll = QScrollArea()
    scroll.setObjectName("metersScroll")
    scroll.setWidget(meters)
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setMinimumWidth(360)
    beside(scroll)
    graphs = GraphsPanel()
    window.add_tab("Performance", graphs)
    window.on_tick(graphs.update_snapshot, fresh=True)
    window.on_tick(meters.update_snapshot, fresh=True, shown=meters)
    window.on_tick(lambda snap: snap is not None and graphs.redraw(), shown=graphs)
    window.controller.engine_changed.connect(lambda _engine: graphs.new_engine())
    return Performance(meters, graphs)
