"""What a feature may use of the main window: ``WindowApi``, the type of every feature's
``install(window)``.

``app.window.main_window.MainWindow`` implements it (pyright checks that where the window
composes its features). Nothing else of the window is a feature's to read or set: what
one feature needs from another is an argument of its ``install``, handed over by the
window's composition, and what a feature keeps is on the object its ``install`` returns
(``tests/app/test_window_api.py`` forbids ``window.<name> = …`` outside ``app/window/``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QSettings, SignalInstance
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget

from app.core.bridge import EventBridge
from app.core.controller import EngineController
from engine.config import EngineConfig


class BannerApi(Protocol):
    """The message across the window, as features use it."""

    def show_message(self, text: str, level: str = "error") -> None:
        """Show ``text`` (``level``: error, info, ok)."""
        ...

    def offer(self, text: str, callback: Callable[[], object]) -> None:
        """Show a button labelled ``text`` that does ``callback()`` with the message."""
        ...


class StatusLineApi(Protocol):
    """The status line (each stage's model and device), as features use it."""

    def set_notice(self, text: str | None) -> None:
        """Add ``text`` to the stack badge's tooltip (None: no notice)."""
        ...


class WindowApi(Protocol):
    """The main window as a feature's ``install(window)`` sees it."""

    @property
    def widget(self) -> QMainWindow:
        """The window itself, as a Qt widget: the parent of a feature's actions and
        dialogs, whose focus and Close a feature may watch."""
        ...

    @property
    def controller(self) -> EngineController:
        """The engine controller (commands, its signals, the latest snapshot)."""
        ...

    @property
    def bridge(self) -> EventBridge:
        """The engine's events as Qt signals."""
        ...

    @property
    def settings(self) -> QSettings:
        """Where the app's settings persist."""
        ...

    @property
    def banner(self) -> BannerApi:
        """The message across the window."""
        ...

    @property
    def stage_status(self) -> StatusLineApi:
        """The status line."""
        ...

    @property
    def menus(self) -> dict[str, QMenu]:
        """The menus by name: "file", "view", "help"."""
        ...

    @property
    def requested_config(self) -> EngineConfig:
        """The config last asked for (what a failed load's "another device" starts from)."""
        ...

    @property
    def interrupted(self) -> SignalInstance:
        """The header's Interrupt (or Esc) cut the reply off."""
        ...

    @property
    def config_requested(self) -> SignalInstance:
        """(config, note): ``apply_config`` was asked to apply ``config``."""
        ...

    @property
    def placements_shown(self) -> SignalInstance:
        """(snapshot): the status line now shows this EngineSnapshot's placements."""
        ...

    def add_tab(self, title: str, widget: QWidget) -> QWidget:
        """Add a tab showing ``widget``; returns its page."""
        ...

    def show_tab(self, page: QWidget) -> None:
        """Make ``page`` (returned by ``add_tab``) the current tab."""
        ...

    def add_file_action(self, action: QAction) -> None:
        """Add ``action`` to the File menu, above Quit."""
        ...

    def add_header_widget(self, widget: QWidget, space_before: int = 0) -> None:
        """Add ``widget`` to the header, after the controls added before it."""
        ...

    def add_status_widget(self, widget: QWidget) -> None:
        """Add ``widget`` at the right end of the status line."""
        ...

    def on_tick(self, callback: Callable[[Any], object], *, shown: QWidget | None = None,
                fresh: bool = False) -> None:
        """Call ``callback(snapshot)`` on every tick (10 Hz)."""
        ...

    def on_close(self, callback: Callable[[], list[str] | None]) -> None:
        """Call ``callback()`` when the window closes; it returns threads still running."""
        ...

    def apply_config(self, config: EngineConfig, note: str = "") -> None:
        """Apply ``config`` and save it once applied; ``note`` says why."""
        ...
