"""Find files of the ``resources/`` folder from a source checkout or a frozen app.

From source, ``resources/`` sits next to the ``app`` package. PyInstaller puts it under
``sys._MEIPASS`` (the ``_internal`` folder of a one-folder build, or ``Contents/Frameworks``
of a macOS ``.app``, where PyInstaller links the data files kept in
``Contents/Resources``). The ``.app``'s ``Contents/Resources`` is searched too, for
bundles whose data was moved there without links.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

from engine.errors import ParleyError

#: Icon PNGs shipped in resources/icons (parley-<size>.png), smallest first.
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512, 1024)


def resource_roots() -> list[Path]:
    """The folders that may hold ``resources/``, most specific first."""
    roots: list[Path] = []
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        roots.append(Path(frozen))
        exe = Path(sys.executable).resolve()
        if exe.parent.name == "MacOS" and exe.parent.parent.name == "Contents":
            roots.append(exe.parent.parent / "Resources")
    roots.append(Path(__file__).resolve().parents[2])  # app/core/resources.py -> the checkout
    return roots


def resource_path(*parts: str) -> Path:
    """The path of ``resources/<parts...>``; ParleyError naming the folders searched if absent.

    ``resource_path("audio", "one_two_three_44k.wav")``; with no parts, the folder itself.
    """
    for part in parts:
        if not part or Path(part).is_absolute() or ".." in Path(part).parts:
            raise ParleyError(f"resource_path parts must be plain relative names; got {parts!r}")
    searched = []
    for root in resource_roots():
        path = root.joinpath("resources", *parts)
        if path.exists():
            return path
        searched.append(str(root / "resources"))
    name = "/".join(parts) or "(the folder itself)"
    raise ParleyError(f"resource {name} not found; looked in: {', '.join(searched)}. "
                      "The app was packaged without its resources folder.")


@cache
def app_icon():
    """Parley's icon as a QIcon with every shipped size (needs a QGuiApplication first).

    Loaded on the first call and kept: the PNGs are read once per process, and Qt picks
    the closest size for title bars, task bars and docks.
    """
    from PySide6.QtCore import QSize
    from PySide6.QtGui import QIcon

    icon = QIcon()
    for size in ICON_SIZES:
        try:
            icon.addFile(str(resource_path("icons", f"parley-{size}.png")), QSize(size, size))
        except ParleyError:
            continue  # a partial set still gives an icon; an empty one is caught below
    if icon.isNull():
        raise ParleyError("no Parley icon PNG found in resources/icons "
                          f"(parley-<size>.png for sizes {', '.join(map(str, ICON_SIZES))})")
    return icon
