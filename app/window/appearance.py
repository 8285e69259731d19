"""View > Theme (System / Light / Dark, saved as ``ui/theme``) and following the system's
colour scheme while System is chosen.

Qt 6.5+ reports the platform's scheme through ``QStyleHints.colorScheme()`` and
``colorSchemeChanged``. Where the platform says nothing (Unknown: many X11 desktops
without a portal, the offscreen platform), System means Light.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QActionGroup, QGuiApplication

from app.core import theme
from app.core.saved_settings import set_ui_value, ui_value

_LABELS = ((theme.ThemeChoice.SYSTEM, "&System"), (theme.ThemeChoice.LIGHT, "&Light"),
           (theme.ThemeChoice.DARK, "&Dark"))


def start_theme(settings) -> theme.Palette:
    """Apply the saved theme choice before the window is built (app start-up)."""
    palette = theme.palette_for(ui_value(settings, "theme", theme.ThemeChoice.SYSTEM.value))
    theme.apply_palette(palette)
    return palette


class ThemeController(QObject):
    """The View > Theme submenu of ``window`` and the system-scheme watch."""

    def __init__(self, window, settings) -> None:
        super().__init__(window)
        self.settings = settings
        try:
            self.choice = theme.ThemeChoice(ui_value(settings, "theme", "system"))
        except ValueError:
            self.choice = theme.ThemeChoice.SYSTEM
        menu = window.menus["view"].addMenu("&Theme")
        menu.menuAction().setObjectName("themeMenu")
        group = QActionGroup(self)
        group.setExclusive(True)
        #: The menu's actions by choice value ("system", "light", "dark").
        self.actions: dict[str, QAction] = {}
        for choice, label in _LABELS:
            action = QAction(label, self, checkable=True)
            action.setChecked(choice is self.choice)
            action.triggered.connect(lambda _c=False, choice=choice: self.choose(choice))
            group.addAction(action)
            menu.addAction(action)
            self.actions[choice.value] = action
        window.theme_actions = self.actions
        hints = QGuiApplication.styleHints()
        hints.colorSchemeChanged.connect(self.system_scheme_changed)
        self._apply()

    def choose(self, choice: theme.ThemeChoice) -> None:
        """The user picked ``choice``: apply and remember it."""
        self.choice = theme.ThemeChoice(choice)
        self.actions[self.choice.value].setChecked(True)
        set_ui_value(self.settings, "theme", self.choice.value)
        self._apply()

    def system_scheme_changed(self, *_args) -> None:
        """The platform switched light/dark: followed while System is chosen."""
        if self.choice is theme.ThemeChoice.SYSTEM:
            self._apply()

    def _apply(self) -> None:
        # Only on a change: re-setting the application stylesheet re-polishes every widget.
        palette = theme.palette_for(self.choice)
        if palette is not theme.current():
            theme.apply_palette(palette)
