"""Screenshots for the README: where they go (``PARLEY_SCREENSHOTS_DIR``, set by ``make
screenshots`` to resources/screenshots; otherwise a test's temporary folder, so a run never
touches the PNGs tracked in git) and a widget shot in the light and the dark theme."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.paths import ROOT

SIZE = (1280, 800)


def screenshot_folder(tmp_path: Path) -> Path:
    """``PARLEY_SCREENSHOTS_DIR`` (relative to the repository root) when set, else a
    folder under ``tmp_path``; created."""
    chosen = os.environ.get("PARLEY_SCREENSHOTS_DIR")
    folder = ROOT / chosen if chosen else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shoot_light_and_dark(qtbot, widget, folder: Path, name: str) -> list[Path]:
    """``name``-light.png and ``name``-dark.png of ``widget`` at 1280x800; the light
    theme is left in force."""
    from app.core import theme

    paths = []
    widget.resize(*SIZE)
    for scheme in ("light", "dark"):
        theme.apply_palette(theme.palette_for(scheme))
        qtbot.wait(250)  # re-polished, and the 10 Hz panels drew once
        image = widget.grab()
        assert (image.width(), image.height()) == SIZE
        path = folder / f"{name}-{scheme}.png"
        assert image.save(str(path))
        paths.append(path)
    theme.apply_palette(theme.palette_for("light"))
    return paths
