"""Themes: both palettes meet WCAG AA for every text/background pair, style.qss is a template
over the palette, View > Theme switches and is saved, the system scheme is followed, and
the painted widgets read the current palette; window state (geometry, splitter, tab) is
restored at start."""

from __future__ import annotations

import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtWidgets import QApplication

from app.core import theme
from app.window.main_window import MainWindow
from engine.config import EngineConfig



@pytest.fixture(autouse=True)
def restore_theme(qapp):
    """Each test leaves the application's look as it found it (light, same stylesheet)."""
    sheet, palette = qapp.styleSheet(), qapp.palette()
    yield
    theme._current = theme.LIGHT
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)


def relative_luminance(hex_color: str) -> float:
    """WCAG 2.x relative luminance of ``#rrggbb``."""
    channels = [int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio, 1 to 21."""
    hi, lo = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_contrast_formula_matches_known_values():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize("palette", [theme.LIGHT, theme.DARK], ids=["light", "dark"])
@pytest.mark.parametrize("pair", theme.TEXT_PAIRS, ids=lambda p: f"{p[0]}-on-{p[1]}")
def test_every_text_pair_meets_wcag_aa(palette, pair):
    fg, bg, minimum = pair
    assert minimum >= 3.0
    ratio = contrast(getattr(palette, fg), getattr(palette, bg))
    assert ratio >= minimum, f"{palette.name}: {fg} on {bg} is {ratio:.2f}:1, needs {minimum}:1"


def test_stylesheet_is_a_template_over_the_palette():
    template = theme._template()
    assert "@text" in template and not re.findall(r"#[0-9a-fA-F]{6}\b", template), \
        "style.qss must name palette colours, not hard-code them"
    for palette in (theme.LIGHT, theme.DARK):
        qss = theme.load_stylesheet(palette)
        assert not re.search(r"@[a-z_]+", qss)
        assert palette.window in qss and palette.text in qss
    with pytest.raises(KeyError, match="nope"):
        theme.render_stylesheet("QWidget { color: @nope; }", theme.LIGHT)


def test_the_system_scheme_decides_the_system_choice(qapp, monkeypatch):
    monkeypatch.setattr(theme, "system_is_dark", lambda: True)
    assert theme.palette_for("system") is theme.DARK
    assert theme.palette_for("light") is theme.LIGHT
    monkeypatch.setattr(theme, "system_is_dark", lambda: False)
    assert theme.palette_for("system") is theme.LIGHT
    assert theme.palette_for("dark") is theme.DARK
    assert theme.palette_for("bogus") is theme.LIGHT


def test_view_theme_menu_switches_saves_and_repaints(qtbot, gui_settings, monkeypatch):
    from app.window.appearance import ThemeController

    monkeypatch.setattr(theme, "system_is_dark", lambda: False)
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    try:
        actions = window.theme_actions
        assert set(actions) == {"system", "light", "dark"}
        assert actions["system"].isChecked() and theme.current() is theme.LIGHT
        actions["dark"].trigger()
        assert theme.current() is theme.DARK
        assert gui_settings.value("ui/theme") == "dark"
        assert theme.DARK.window in QApplication.instance().styleSheet()
        # Painted widgets read the palette at paint time, pyqtgraph and rich text restyle.
        assert theme.MUTED == theme.DARK.muted
        assert theme.resolve("stage:llm") == theme.DARK.stage_colors["llm"]
        assert window.performance.graphs.background_color() == theme.DARK.surface
        window.level.grab()  # paints with the dark track, no error
        # The system scheme changes while "System" is chosen: followed; not while "Light" is.
        actions["system"].trigger()
        monkeypatch.setattr(theme, "system_is_dark", lambda: True)
        window.appearance.system_scheme_changed()
        assert theme.current() is theme.DARK
        actions["light"].trigger()
        window.appearance.system_scheme_changed()
        assert theme.current() is theme.LIGHT
        assert isinstance(window.appearance, ThemeController)
    finally:
        window.close()


def test_window_state_is_restored(qtbot, gui_settings, monkeypatch):
    first = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(first)
    first.resize(1100, 700)
    first.show()
    first.chat.split.setSizes([500, 600])
    left, right = first.chat.split.sizes()[:2]  # the timers column (app.tools) is hidden: none set
    first.tabs.setCurrentIndex(2)
    saved_geometry = first.saveGeometry()
    first.close()
    assert gui_settings.value("ui/geometry") == saved_geometry
    second = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(second)
    # The offscreen screen is smaller than the window's minimum size, so Qt fits a restored
    # geometry to it: what is checked is that the saved geometry is the one restored.
    restored = []
    real = second.restoreGeometry
    monkeypatch.setattr(second, "restoreGeometry", lambda g: restored.append(bytes(g)) or real(g))
    second.restore_state()
    second.show()
    try:
        assert restored == [bytes(saved_geometry)]
        assert second.tabs.currentIndex() == 2
        # The split comes back in proportion (the window may be narrower than before),
        # laid out once its tab is shown.
        second.tabs.setCurrentIndex(0)
        qtbot.waitUntil(lambda: abs(second.chat.split.sizes()[0] / sum(second.chat.split.sizes())
                                    - left / (left + right)) < 0.02, timeout=3000)
    finally:
        second.close()


def test_a_damaged_window_state_is_ignored(qtbot, gui_settings):
    gui_settings.setValue("ui/geometry", b"junk")
    gui_settings.setValue("ui/splitter", b"junk")
    gui_settings.setValue("ui/tab", "17")
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.restore_state()
    assert window.tabs.currentIndex() == 0
    assert window.width() >= 1024
    window.close()


def test_stage_chips_restyle_and_name_the_stage_in_text_colour(qtbot):
    from engine.engine import StagePlacement

    from app.window.status_line import StageStatus

    status = StageStatus()
    qtbot.addWidget(status)
    status.show_placements((StagePlacement("stt", "faster-whisper", "/m/tiny.en", "cpu", "cpu", True),))
    chip = status.chips["stt"].text()
    # The lighter stage colours are a mark, the stage's name is in the text colour.
    assert f"color:{theme.LIGHT.stage_colors['stt']}'>&#9632;" in chip and "<b>STT</b>" in chip
    theme.apply_palette(theme.DARK)
    assert theme.DARK.stage_colors["stt"] in status.chips["stt"].text()


def test_a_theme_switch_after_panels_were_deleted_is_harmless(qtbot, gui_settings):
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    window.close()
    window.deleteLater()
    qtbot.wait(50)
    theme.apply_palette(theme.DARK)  # the deleted graphs and chips are not called
