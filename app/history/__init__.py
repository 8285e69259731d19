"""The history browser: past conversations by day, search, export, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtGui import QAction

    from app.core.window_api import WindowApi


def install(window: WindowApi) -> QAction:
    """Add File > Conversation history… (Ctrl+H) to ``window``: past conversations,
    reopened and exported. A history that cannot be opened is said in the banner.
    Returns the action."""
    from PySide6.QtGui import QAction, QKeySequence

    from engine.errors import ParleyError

    opened: list = []  # the dialog last opened, kept referenced while the window lives

    def show() -> None:
        from app.history.browser import HistoryDialog  # the store opens only when asked

        try:
            dialog = HistoryDialog(parent=window.widget)
        except ParleyError as exc:
            window.banner.show_message(str(exc))
            return
        opened[:] = [dialog]
        dialog.open()

    action = QAction("Conversation history…", window.widget, shortcut=QKeySequence("Ctrl+H"))
    action.setObjectName("historyAction")
    action.triggered.connect(show)
    window.add_file_action(action)
    return action
