"""Colours shared by the stylesheet, the painted meters and the graphs, and the QSS loader."""

from __future__ import annotations

import logging

from PySide6.QtGui import QColor

from engine.errors import ParleyError

TEXT = "#1f2933"
MUTED = "#6b7785"
BORDER = "#dde2e8"
SURFACE = "#ffffff"
WINDOW = "#f3f5f8"
ACCENT = "#2563eb"
GOOD = "#16a34a"
WARN = "#d97706"
BAD = "#dc2626"
TRACK = "#e8ecf1"

#: One colour per pipeline part, the same in every graph and meter.
STAGE_COLORS = {
    "wait": "#a3b1c2",  # turn-taking: silence wait and reopen grace
    "vad": "#8b5cf6",
    "stt": "#0ea5e9",
    "llm": "#f59e0b",
    "tts": "#10b981",
    "sink": "#64748b",
    "output": "#64748b",
}
#: Colours for per-device series (memory), in order of appearance.
SERIES_COLORS = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2")


def color(name: str) -> QColor:
    """A QColor from a ``#rrggbb`` string."""
    return QColor(name)


def load_stylesheet() -> str:
    """The app's stylesheet (resources/style.qss); '' with a warning if it was not shipped.

    Qt resolves ``url()`` in a stylesheet against the working directory, so the icon
    folder is made absolute here.
    """
    from app.resources import resource_path

    try:
        path = resource_path("style.qss")
    except ParleyError as exc:
        logging.getLogger("parley.app").warning("%s", exc)
        return ""
    icons = (path.parent / "icons").as_posix()
    return path.read_text(encoding="utf-8").replace("url(icons/", f"url({icons}/")
