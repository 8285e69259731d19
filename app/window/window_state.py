"""The window's geometry, the conversation/meters splitter and the current tab, saved at
close (``ui/geometry``, ``ui/splitter``, ``ui/tab``) and restored at start.

Damaged or foreign values (another Qt version, a hand-edited file) are ignored: the
window then opens at its default size, split and tab.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QMainWindow, QSplitter, QTabWidget

from app.core.saved_settings import set_ui_value, ui_value

DEFAULT_SIZE = (1280, 800)


def save_window_state(window: QMainWindow, split: QSplitter, tabs: QTabWidget, settings: QSettings) -> None:
    """Remember ``window``'s geometry, the ``split`` state and the current tab of ``tabs``
    in ``settings``."""
    set_ui_value(settings, "geometry", window.saveGeometry())
    set_ui_value(settings, "splitter", split.saveState())
    set_ui_value(settings, "tab", tabs.currentIndex())


def restore_window_state(window: QMainWindow, split: QSplitter, tabs: QTabWidget,
                         settings: QSettings) -> None:
    """Put ``window``, ``split`` and ``tabs`` back as saved; defaults for what was not (or
    is damaged)."""
    geometry = settings.value("ui/geometry")
    try:
        restored = geometry is not None and window.restoreGeometry(geometry)
    except TypeError:  # not a byte array at all
        restored = False
    if not restored:
        window.resize(*DEFAULT_SIZE)
    saved = settings.value("ui/splitter")
    if saved is not None:
        # After the window is shown and laid out at its restored size: a splitter restored
        # earlier is squeezed to the widgets' first, smaller size.
        QTimer.singleShot(0, split, lambda: _restore_split(split, saved))
    tab = ui_value(settings, "tab", 0)
    if 0 <= tab < tabs.count():
        tabs.setCurrentIndex(tab)


def _restore_split(split: QSplitter, state) -> None:
    try:
        split.restoreState(state)
    except TypeError:  # not a byte array at all
        pass
