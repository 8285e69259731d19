"""Keyboard shortcuts that are not a menu item of their own, and the Settings shortcut.

Listen/Stop (Ctrl+L), Interrupt (Esc) and the tabs (Ctrl+1…5) are File and View menu
actions made by the window; the push-to-talk key is the window's event filter (and, where
the platform allows, ``app.conversation.global_hotkey``). This adds View > Settings… (Ctrl+, — the
platform's Preferences key where it has another) and the keyboard path into the tabs.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence

SETTINGS_KEY = "Ctrl+,"


def install_shortcuts(window) -> None:
    """Add the Settings action to ``window``'s View menu (idempotent)."""
    if getattr(window, "settings_action", None) is not None:
        return
    action = QAction("Settings…", window)
    keys = [QKeySequence(SETTINGS_KEY)]
    keys += [k for k in QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences) if k not in keys]
    action.setShortcuts(keys)
    action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.setMenuRole(QAction.MenuRole.PreferencesRole)  # the app menu's item on macOS
    action.triggered.connect(lambda: show_settings(window))
    window.menus["view"].addSeparator()
    window.menus["view"].addAction(action)
    window.settings_action = action


def show_settings(window) -> None:
    """The Settings tab, with the keyboard focus in it."""
    window.tabs.setCurrentWidget(window.settings_page)
    first = getattr(window.panel, "global_device", window.panel)  # the panel's first control
    first.setFocus(Qt.FocusReason.ShortcutFocusReason)
