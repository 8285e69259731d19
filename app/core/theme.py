"""Colours: one Palette per theme (light, dark), the current one, and the stylesheet made
from it.

resources/style.qss is a template: ``@name`` stands for the current palette's field
``name``. Painted widgets (meters, graphs, the status line) read ``current()`` when they
paint, never a colour taken at import time, so a theme switch repaints them correctly;
widgets that bake colours into rich text or pyqtgraph items connect to
``notifier().changed`` and restyle.

The module-level names ``TEXT``, ``MUTED``, ``ACCENT``… and ``STAGE_COLORS`` /
``SERIES_COLORS`` still work: they read the current palette on every access.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass, field, fields

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from engine.errors import ParleyError


@dataclass(frozen=True)
class Palette:
    """The named colours of one theme (``#rrggbb``). ``TEXT_PAIRS`` lists which of them
    are drawn as text on which backgrounds (checked for WCAG AA contrast by the tests)."""

    name: str
    dark: bool
    window: str  # the window's background
    surface: str  # cards, header, inputs, status bar
    surface_alt: str  # hover, the reply bubble
    pressed: str
    border: str  # card edges
    control_border: str  # buttons, inputs
    control_border_hover: str
    disabled_bg: str
    disabled_border: str
    disabled_text: str  # WCAG exempts disabled controls
    text: str
    text_secondary: str  # labels that matter less (meter titles, pill text)
    muted: str  # hints, captions, axes
    chip_text: str
    accent: str  # filled buttons, the user's bubble, selection marks
    accent_hover: str
    on_accent: str  # text on accent
    user_muted: str  # the still-changing words in the user's (accent) bubble
    accent_text: str  # accent-coloured text on surface or window (links, sections)
    accent_soft: str  # selected items
    accent_disabled: str
    on_accent_disabled: str
    bad: str  # the Stop button, the error icon
    bad_hover: str
    on_bad: str
    good: str  # the talking key, bars
    on_good: str
    warn: str
    error_text: str
    ok_text: str
    pill_bg: str
    pill_text: str
    ready_bg: str
    ready_text: str
    listening_bg: str
    listening_text: str
    loading_bg: str
    loading_text: str
    banner_bg: str
    banner_border: str
    banner_text: str
    info_bg: str
    info_border: str
    info_text: str
    tooltip_bg: str
    tooltip_text: str
    track: str  # bar meter tracks, progress bars
    scroll_handle: str
    #: One colour per pipeline part, the same in every graph and meter (graphics, not text).
    stage_colors: dict[str, str] = field(default_factory=dict, hash=False)
    #: Colours for per-device series (memory), in order of appearance.
    series_colors: tuple[str, ...] = ()

    def color(self, name: str) -> QColor:
        """The QColor of field ``name``."""
        return QColor(getattr(self, name))


#: (foreground, background, minimum contrast): every text colour on every background it
#: is drawn on. 4.5 for normal text; 3.0 for large text and UI marks.
TEXT_PAIRS: tuple[tuple[str, str, float], ...] = (
    ("text", "window", 4.5), ("text", "surface", 4.5), ("text", "surface_alt", 4.5),
    ("text", "pressed", 4.5), ("text", "accent_soft", 4.5),
    ("text_secondary", "surface", 4.5), ("text_secondary", "window", 4.5),
    ("text_secondary", "surface_alt", 4.5),
    ("muted", "surface", 4.5), ("muted", "window", 4.5), ("muted", "surface_alt", 4.5),
    ("chip_text", "window", 4.5),
    ("on_accent", "accent", 4.5), ("user_muted", "accent", 4.5), ("on_accent", "accent_hover", 4.5),
    ("accent_text", "surface", 4.5), ("accent_text", "window", 4.5),
    ("on_bad", "bad", 4.5), ("on_bad", "bad_hover", 4.5), ("on_good", "good", 4.5),
    ("error_text", "surface", 4.5), ("error_text", "window", 4.5),
    ("ok_text", "surface", 4.5), ("ok_text", "window", 4.5),
    ("pill_text", "pill_bg", 4.5), ("ready_text", "ready_bg", 4.5),
    ("listening_text", "listening_bg", 4.5), ("loading_text", "loading_bg", 4.5),
    ("banner_text", "banner_bg", 4.5), ("info_text", "info_bg", 4.5),
    ("text_secondary", "banner_bg", 4.5), ("text_secondary", "info_bg", 4.5),
    ("tooltip_text", "tooltip_bg", 4.5),
    # UI marks: focus/selection edges, the checkbox border, bars against their track.
    ("accent", "surface", 3.0), ("accent", "window", 3.0), ("good", "track", 3.0),
    ("bad", "surface", 3.0),
)

# Stages, and the parts of a turn's critical path that are no stage's work (the budget
# bars: "commit" the wait for the turn to commit, "lock" and "queue" waits, "overhead",
# "eot" the learned end of turn's text signal).
_STAGES_LIGHT = {"wait": "#a3b1c2", "vad": "#8b5cf6", "stt": "#0ea5e9", "llm": "#f59e0b",
                 "llm_clause": "#fcd34d", "tts": "#10b981", "sink": "#64748b",
                 "output": "#64748b", "commit": "#cbd5e1", "lock": "#ef4444",
                 "queue": "#f97316", "overhead": "#c084fc", "eot": "#a3e635"}
_STAGES_DARK = {"wait": "#7d8a99", "vad": "#a78bfa", "stt": "#38bdf8", "llm": "#fbbf24",
                "llm_clause": "#fde68a", "tts": "#34d399", "sink": "#94a3b8",
                "output": "#94a3b8", "commit": "#4b5563", "lock": "#f87171",
                "queue": "#fb923c", "overhead": "#d8b4fe", "eot": "#bef264"}

LIGHT = Palette(
    name="light", dark=False,
    window="#f3f5f8", surface="#ffffff", surface_alt="#f1f4f8", pressed="#e6ebf1",
    border="#dde2e8", control_border="#cfd6de", control_border_hover="#b8c2cd",
    disabled_bg="#f6f7f9", disabled_border="#e2e6eb", disabled_text="#a0aab5",
    text="#1f2933", text_secondary="#52606d", muted="#5d6977", chip_text="#3e4c59",
    accent="#2563eb", accent_hover="#1d4fd8", on_accent="#ffffff", accent_text="#1d4fd8",
    user_muted="#eef3ff",
    accent_soft="#dbeafe", accent_disabled="#9db6f3", on_accent_disabled="#f4f7ff",
    bad="#dc2626", bad_hover="#b91c1c", on_bad="#ffffff",
    good="#15803d", on_good="#ffffff", warn="#d97706",
    error_text="#b91c1c", ok_text="#15803d",
    pill_bg="#e8ecf1", pill_text="#3e4c59", ready_bg="#dcfce7", ready_text="#166534",
    listening_bg="#fee2e2", listening_text="#b91c1c", loading_bg="#fef3c7", loading_text="#92400e",
    banner_bg="#fef2f2", banner_border="#fecaca", banner_text="#7f1d1d",
    info_bg="#eff6ff", info_border="#bfdbfe", info_text="#1e3a8a",
    tooltip_bg="#1f2933", tooltip_text="#ffffff", track="#e8ecf1", scroll_handle="#cfd6de",
    stage_colors=_STAGES_LIGHT,
    series_colors=("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2"),
)

DARK = Palette(
    name="dark", dark=True,
    window="#14181d", surface="#1c2128", surface_alt="#252c35", pressed="#2d3540",
    border="#2e3640", control_border="#3c4552", control_border_hover="#566170",
    disabled_bg="#1a1e24", disabled_border="#2a3038", disabled_text="#5c6673",
    text="#e6e9ed", text_secondary="#bac3cd", muted="#a0abb7", chip_text="#c9d1da",
    accent="#2563eb", accent_hover="#1d4fd8", on_accent="#ffffff", accent_text="#8ab4ff",
    user_muted="#eef3ff",
    accent_soft="#1e3a64", accent_disabled="#2a3f6b", on_accent_disabled="#8b97ab",
    bad="#dc2626", bad_hover="#b91c1c", on_bad="#ffffff",
    good="#22c55e", on_good="#0b1f12", warn="#f59e0b",
    error_text="#fca5a5", ok_text="#86efac",
    pill_bg="#2a313a", pill_text="#c9d1da", ready_bg="#123523", ready_text="#86efac",
    listening_bg="#3f1618", listening_text="#fca5a5", loading_bg="#3a2a0c", loading_text="#fcd34d",
    banner_bg="#3a1619", banner_border="#7f1d1d", banner_text="#fecaca",
    info_bg="#15233f", info_border="#1e3a8a", info_text="#bfdbfe",
    tooltip_bg="#e6e9ed", tooltip_text="#14181d", track="#2a313a", scroll_handle="#3c4552",
    stage_colors=_STAGES_DARK,
    series_colors=("#60a5fa", "#f472b6", "#34d399", "#fbbf24", "#a78bfa", "#22d3ee"),
)

PALETTES = {"light": LIGHT, "dark": DARK}


class ThemeChoice(enum.StrEnum):
    """What the user picked in View > Theme (QSettings ``ui/theme``)."""

    SYSTEM = "system"
    LIGHT = "light"
    DARK = "dark"


_current: Palette = LIGHT


def current() -> Palette:
    """The palette in use now: read it at paint time."""
    return _current


def resolve(ref: str) -> str:
    """A colour reference made concrete with the current palette: ``#rrggbb`` as is, a field
    name (``"accent"``), ``"stage:llm"`` or ``"series:3"`` (wraps around)."""
    if ref.startswith("#"):
        return ref
    kind, _, key = ref.partition(":")
    pal = _current
    if kind == "stage":
        return pal.stage_colors.get(key, pal.accent)
    if kind == "series":
        return pal.series_colors[int(key) % len(pal.series_colors)]
    return getattr(pal, ref)


def color(name: str) -> QColor:
    """A QColor from a ``#rrggbb`` string or a palette reference (see ``resolve``)."""
    return QColor(resolve(name))


class _Notifier(QObject):
    """Emits ``changed(Palette)`` after the theme switched."""

    changed = Signal(object)


_notifier: _Notifier | None = None


def notifier() -> _Notifier:
    """The application-wide theme notifier (created on first use, on the GUI thread)."""
    global _notifier
    if _notifier is None:
        _notifier = _Notifier()
    return _notifier


def system_is_dark() -> bool:
    """True when the platform reports a dark colour scheme (Qt 6.5+); False when it reports
    light or nothing (Unknown: many X11 desktops, the offscreen platform)."""
    app = QGuiApplication.instance()
    if app is None:
        return False
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def palette_for(choice: str | ThemeChoice) -> Palette:
    """The palette a View > Theme choice means now (System follows the platform)."""
    try:
        choice = ThemeChoice(choice)
    except ValueError:
        choice = ThemeChoice.SYSTEM
    if choice is ThemeChoice.SYSTEM:
        return DARK if system_is_dark() else LIGHT
    return PALETTES[choice.value]


_TOKEN = re.compile(r"@([a-z_]+)")


def render_stylesheet(template: str, palette: Palette) -> str:
    """``template`` with every ``@name`` replaced by ``palette.name``; an unknown name raises
    KeyError (a typo in style.qss is found by the tests, not shown as a black widget)."""
    names = {f.name for f in fields(palette)}

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in names:
            raise KeyError(f"style.qss names no palette colour {name!r}")
        return getattr(palette, name)

    return _TOKEN.sub(sub, template)


def _template() -> str:
    from app.core.resources import resource_path

    try:
        path = resource_path("style.qss")
    except ParleyError as exc:
        logging.getLogger("parley.app").warning("%s", exc)
        return ""
    icons = (path.parent / "icons").as_posix()
    # Qt resolves url() in a stylesheet against the working directory: make it absolute.
    return path.read_text(encoding="utf-8").replace("url(icons/", f"url({icons}/")


def load_stylesheet(palette: Palette | None = None) -> str:
    """The app's stylesheet for ``palette`` (the current one by default); '' with a warning
    if resources/style.qss was not shipped."""
    return render_stylesheet(_template(), palette or _current)


def qpalette(pal: Palette) -> QPalette:
    """A QPalette for the parts the stylesheet does not reach (native menus, dialogs)."""
    q = QPalette()
    roles = QPalette.ColorRole
    for role, name in ((roles.Window, "window"), (roles.WindowText, "text"), (roles.Base, "surface"),
                       (roles.AlternateBase, "surface_alt"), (roles.Text, "text"),
                       (roles.Button, "surface"), (roles.ButtonText, "text"),
                       (roles.Highlight, "accent"), (roles.HighlightedText, "on_accent"),
                       (roles.ToolTipBase, "tooltip_bg"), (roles.ToolTipText, "tooltip_text"),
                       (roles.PlaceholderText, "muted"), (roles.Link, "accent_text")):
        q.setColor(role, pal.color(name))
    q.setColor(QPalette.ColorGroup.Disabled, roles.Text, pal.color("disabled_text"))
    q.setColor(QPalette.ColorGroup.Disabled, roles.ButtonText, pal.color("disabled_text"))
    q.setColor(QPalette.ColorGroup.Disabled, roles.WindowText, pal.color("disabled_text"))
    return q


def apply_palette(pal: Palette, app=None) -> None:
    """Make ``pal`` current: the application's stylesheet and QPalette, then
    ``notifier().changed`` for the widgets that bake colours in."""
    global _current
    _current = pal
    app = app or QGuiApplication.instance()
    if isinstance(app, QGuiApplication):
        app.setPalette(qpalette(pal))
        if isinstance(app, QApplication):  # widgets, hence a stylesheet
            app.setStyleSheet(load_stylesheet(pal))
    notifier().changed.emit(pal)


# The old module constants, kept for code that reads ``theme.MUTED`` and friends: each
# access reads the current palette (``from app.core.theme import MUTED`` freezes it, so the
# app's own modules use current() instead).
_LEGACY = {"TEXT": "text", "MUTED": "muted", "BORDER": "border", "SURFACE": "surface",
           "WINDOW": "window", "ACCENT": "accent", "GOOD": "good", "WARN": "warn",
           "BAD": "bad", "TRACK": "track"}


def __getattr__(name: str):
    if name in _LEGACY:
        return getattr(_current, _LEGACY[name])
    if name == "STAGE_COLORS":
        return _current.stage_colors
    if name == "SERIES_COLORS":
        return _current.series_colors
    raise AttributeError(f"module 'app.core.theme' has no attribute {name!r}")
