"""``parley``: start the desktop app. ``parley --config FILE`` starts on that engine config.

Without ``--config`` the engine config comes from the saved settings (QSettings); with it,
the file's config is used and saved when applied. ``--self-test`` runs the app's
self-test (``app.selftest``) instead of opening the window.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


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

    from app.settings import load_config, open_settings

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Parley")
    app.setOrganizationName("Parley")
    app.setApplicationDisplayName("Parley")
    from app.resources import app_icon
    from app.theme import load_stylesheet

    app.setStyleSheet(load_stylesheet())
    try:
        app.setWindowIcon(app_icon())
    except ParleyError as exc:  # a packaging fault: say so, but the app still works
        logging.getLogger("parley.app").warning("%s", exc)
    settings = open_settings(args.settings)
    notes: list[str] = []
    try:
        if args.config:
            config = load_toml(args.config)
            notes.append(f"Started with the engine config {args.config}.")
        else:
            config, notes = load_config(settings)
    except ParleyError as exc:
        return _fail(str(exc))

    from app.main_window import MainWindow

    window = MainWindow(config, settings, autoload=not args.no_load, notes=notes)
    geometry = settings.value("ui/geometry")
    if geometry is None or not window.restoreGeometry(geometry):
        window.resize(1280, 800)
    window.show()
    status = app.exec()
    if window.shutdown_stuck:
        print("parley: engine threads still running at exit: " + ", ".join(window.shutdown_stuck),
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
