"""The assistant's tools in the window: asking before a tool with side effects runs, the
timers and reminders it set (listed, cancellable), and a notification when one is due."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.core.window_api import WindowApi
    from app.tools.feature import ToolsFeature


def install(window: WindowApi, beside: Callable[[QWidget], object]) -> ToolsFeature:
    """Give every engine of ``window`` the confirmation dialog, and list its timers where
    ``beside(widget)`` places them (beside the conversation); returns the ``ToolsFeature``."""
    # Imported here, not at the top: a module of the feature (the dialog, the timers
    # list) can then be imported alone.
    from app.tools.feature import ToolsFeature

    return ToolsFeature(window, beside)
