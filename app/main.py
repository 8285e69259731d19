"""``parley``: start the desktop app. ``parley --config FILE`` starts on that engine config.

Without ``--config`` the engine config comes from the saved settings (QSettings); with it,
the file's config is used and saved when applied. ``--self-test`` runs the app's
self-test (``app.selftest``) instead of opening the window.

Before the window: on Linux, Qt's "xcb" platform plugin needs X libraries a bare desktop
may lack (libxcb-cursor0 above all), and without them Qt aborts with a screenful of
text. ``qt_platform_problem`` loads the plugin first (as Qt would) and, if a library is
missing, ``parley`` prints one line naming it and the command that installs it, and exits
with status 1. Any other failure of the platform plugin (no display) is caught where Qt
reports it, and told in one line too.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

#: Where a shared library comes from, per package family: (Debian/Ubuntu, Fedora, Arch).
#: Debian's names are those ``.ci/run`` installs; see README "System packages".
_LIB_PACKAGES = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd"),
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
}
_INSTALLERS = (("sudo apt install", 0), ("sudo dnf install", 1), ("sudo pacman -S", 2))
_MISSING = re.compile(r"^\s*(\S+?\.so[\w.]*):\s*cannot open shared object file")
_LDD_MISSING = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``parley``."""
    parser = argparse.ArgumentParser(prog="parley",
                                     description="Parley, a voice assistant on your own hardware")
    parser.add_argument("--config", metavar="FILE", help="start with this TOML engine config")
    parser.add_argument("--settings", metavar="INI",
                        help="keep the app's settings in this INI file instead of the user's")
    parser.add_argument("--no-load", action="store_true", help="open the window without loading models")
    parser.add_argument("--self-test", action="store_true",
                        help="check that the app and its models work here, then exit "
                             "(see parley --self-test --help)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    return parser


# ---------------------------------------------------------------------- Qt platform check
def _requested_platform(env) -> str | None:
    """The one platform plugin Qt will try, if it is one (None: a list, or a session where
    Qt picks Wayland first)."""
    requested = env.get("QT_QPA_PLATFORM", "").strip()
    if requested:
        names = [n.split(":", 1)[0].strip() for n in requested.split(";") if n.strip()]
        return names[0] if len(names) == 1 else None
    if env.get("XDG_SESSION_TYPE") == "wayland" or env.get("WAYLAND_DISPLAY"):
        return None
    return "xcb"


def _plugin_file(platform: str, env) -> Path | None:
    """The plugin file Qt would load for ``platform``: its search order, first hit."""
    folders = [Path(p) for p in env.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep) if p]
    folders += [Path(p) / "platforms" for p in env.get("QT_PLUGIN_PATH", "").split(os.pathsep) if p]
    try:
        from PySide6.QtCore import QLibraryInfo

        folders.append(Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms")
    except ImportError:
        return None
    for folder in folders:
        candidate = folder / f"libq{platform}.so"
        if candidate.is_file():
            return candidate
    return None


def _dlopen(path: str) -> None:
    """Load a shared library as Qt would: OSError names what is missing."""
    ctypes.CDLL(path)


def _missing_libraries(plugin: Path, load: Callable[[str], None] | None = None) -> list[str]:
    """The shared libraries ``plugin`` needs and cannot find (empty: it loads). Loading
    names the first; ``ldd`` lists all of them where it is installed."""
    try:
        (load or _dlopen)(str(plugin))
        return []
    except OSError as exc:
        first = _MISSING.match(str(exc))
        if first is None:
            return [str(exc).strip() or type(exc).__name__]
        found = [first.group(1)]
    try:
        import subprocess

        out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=10)
        found += [n for n in _LDD_MISSING.findall(out.stdout) if n not in found]
    except (OSError, subprocess.SubprocessError):
        pass
    return found


def _family(os_release: str | None = None) -> int | None:
    """0 Debian/Ubuntu, 1 Fedora/RHEL, 2 Arch (``_LIB_PACKAGES`` columns), None: other."""
    if os_release is None:
        try:
            os_release = Path("/etc/os-release").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    ids = " ".join(m.group(1) for m in re.finditer(r"^(?:ID|ID_LIKE)=\"?([^\"\n]*)", os_release,
                                                    re.MULTILINE)).lower().split()
    for family, names in ((0, ("debian", "ubuntu")), (1, ("fedora", "rhel", "centos")),
                          (2, ("arch",))):
        if any(n in ids for n in names):
            return family
    return None


def install_hint(libraries: list[str], family: int | None = None) -> str:
    """The command that installs ``libraries`` here (or what to look for)."""
    family = _family() if family is None else family
    if family is None:
        return "install the packages that provide " + ", ".join(libraries)
    packages = list(dict.fromkeys(_LIB_PACKAGES[lib][family] if lib in _LIB_PACKAGES else lib
                                  for lib in libraries))
    return f"{_INSTALLERS[family][0]} {' '.join(packages)}"


def qt_platform_problem(env=None, load: Callable[[str], None] | None = None) -> str | None:
    """Why Qt's platform plugin cannot start here, in one sentence, or None.

    Checked only where it is known to fail on a bare system: Linux, the "xcb" plugin
    (X11). A plugin Parley cannot find is left to Qt (it knows more places to look).
    """
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux") or _requested_platform(env) != "xcb":
        return None
    plugin = _plugin_file("xcb", env)
    if plugin is None:
        return None
    missing = _missing_libraries(plugin, load)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        return (f'Qt\'s "xcb" platform plugin needs {", ".join(missing)}, which {verb} not '
                f"installed ({install_hint(missing)})")
    if not env.get("DISPLAY"):
        return ('Qt\'s "xcb" platform plugin has no X display to connect to (DISPLAY is not set); '
                "start Parley in a desktop session, or run it headless: parley --self-test, parley-cli")
    return None


class _QtStartWatch:
    """Qt's messages while the QApplication starts: kept, and if the platform plugin
    fails (Qt then aborts), told in one line before the process exits with status 1."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []  # (category, text)
        self._previous = None

    def __enter__(self) -> _QtStartWatch:
        from PySide6.QtCore import qInstallMessageHandler

        self._previous = qInstallMessageHandler(self._handle)
        return self

    def __exit__(self, *exc) -> None:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(self._previous)
        for category, text in self.messages:  # what Qt would have printed itself
            print(f"{category}: {text}" if category else text, file=sys.stderr)

    def _handle(self, mode, context, text: str) -> None:
        from PySide6.QtCore import QtMsgType

        category = getattr(context, "category", "") or ""
        if mode != QtMsgType.QtFatalMsg:
            self.messages.append((category, text))
            return
        platform = _requested_platform(os.environ) or "platform"
        reasons = [t.strip() for c, t in self.messages
                   if c.startswith("qt.qpa") and not t.startswith("From 6.5.0")]
        reason = "; ".join(reasons) or text.strip().splitlines()[0]
        print(f'parley: cannot start the window: Qt\'s "{platform}" platform plugin failed '
              f"({reason})", file=sys.stderr, flush=True)
        os._exit(1)  # Qt aborts once this returns


def _fail(message: str) -> int:
    """Show a startup error: in a message box (a GUI app may have no console) and on stderr."""
    print(f"parley: error: {message}", file=sys.stderr)
    from PySide6.QtWidgets import QApplication, QMessageBox

    app = QApplication.instance() or QApplication(sys.argv[:1])
    if os.environ.get("QT_QPA_PLATFORM") != "offscreen":
        QMessageBox.critical(None, "Parley", message)
    del app
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``parley`` and ``python -m app``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--self-test" in argv:  # its own command line (--output...), and no window
        try:
            from app import selftest
        except ImportError:
            return _fail("the self-test is not part of this build (app/selftest.py is missing)")
        return selftest.main(argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    from engine.config import load_config as load_toml
    from engine.errors import ParleyError

    from app.core.saved_settings import load_config, open_settings

    problem = qt_platform_problem()
    if problem is not None:
        print(f"parley: cannot start the window: {problem}", file=sys.stderr)
        return 1

    from PySide6.QtWidgets import QApplication

    from app.core.widgets import application

    if QApplication.instance() is None:
        with _QtStartWatch():
            QApplication(sys.argv[:1])
    app = application()
    app.setApplicationName("Parley")
    app.setOrganizationName("Parley")
    app.setApplicationDisplayName("Parley")
    from app.window.appearance import start_theme
    from app.core.resources import app_icon

    try:
        app.setWindowIcon(app_icon())
    except ParleyError as exc:  # a packaging fault: say so, but the app still works
        logging.getLogger("parley.app").warning("%s", exc)
    settings = open_settings(args.settings)
    start_theme(settings)  # View > Theme's saved choice (System follows the platform)
    notes: list[str] = []
    try:
        if args.config:
            config = load_toml(args.config)
            notes.append(f"Started with the engine config {args.config}.")
        else:
            config, notes = load_config(settings)
    except ParleyError as exc:
        return _fail(str(exc))

    from app.window.main_window import MainWindow

    window = MainWindow(config, settings, autoload=not args.no_load, notes=notes)
    window.restore_state()  # geometry, splitter, tab of the last session
    window.show()
    status = app.exec()
    if window.shutdown_stuck:
        print("parley: engine threads still running at exit: " + ", ".join(window.shutdown_stuck),
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
