"""Render resources/icons/parley.svg to the PNG, .ico and .icns files the platforms need.

    python packaging/make_icons.py        (run from anywhere; needs PySide6 with QtSvg)

Sizes up to 32 px come from parley-small.svg, a simplified drawing that stays legible on
a few pixels; larger ones from the master parley.svg. Rendering uses Qt's own SVG
renderer on the offscreen platform, so no display, Inkscape or Pillow is needed. The
outputs are committed; run this again after changing either SVG.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ICONS = HERE.parent / "resources" / "icons"
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512, 1024)
SMALL_MAX = 32  # sizes up to this use the simplified drawing

sys.path.insert(0, str(HERE))
from iconfiles import write_icns, write_ico  # noqa: E402


def render(svg: Path, size: int) -> bytes:
    """``svg`` rendered to a ``size`` x ``size`` PNG with a transparent background."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"make_icons: {svg} is not an SVG Qt can render")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(0)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data)


def main() -> int:
    """Write parley-<size>.png for every size, parley.ico and parley.icns."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 - Qt needs one
    pngs: dict[int, bytes] = {}
    for size in SIZES:
        svg = ICONS / ("parley-small.svg" if size <= SMALL_MAX else "parley.svg")
        pngs[size] = render(svg, size)
        (ICONS / f"parley-{size}.png").write_bytes(pngs[size])
    write_ico(ICONS / "parley.ico", pngs)
    write_icns(ICONS / "parley.icns", pngs)
    for name in sorted(p.name for p in ICONS.iterdir()):
        print(f"{name:20} {(ICONS / name).stat().st_size:>9} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
