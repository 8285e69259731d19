"""Help > Check this computer…: the doctor's report (``engine.doctor``, the same as
``parley-cli doctor``) in a window, with a button that copies its JSON for a bug report.

The checks import libraries and start programs (seconds), so they run on a lane the
dialog owns (``app.core.background``), never on the GUI thread; the report is shown when
it comes back. "Check again" supersedes a check still running (its report is dropped).
Qt is not started in a child process here: the app's own Qt is read, live, on the GUI
thread, before the checks go off it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QLibraryInfo, Qt, qVersion
from PySide6.QtGui import QAction, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.core.background import Failure, Job, JobKind, LatestLane
from engine.config import EngineConfig
from engine.doctor.probes import Probes
from engine.doctor.readings import QtAnswer
from engine.doctor.report import Level, Report, render_text
from engine.doctor.run import run_checks

if TYPE_CHECKING:
    from app.core.window_api import WindowApi

JOIN_S = 0.5  # closing never waits for a check that is importing libraries
_PLUGIN_SUFFIXES = (".so", ".dylib", ".dll")


def live_qt() -> QtAnswer:
    """This app's Qt: its version, the platform plugin it runs on, the plugins it has (GUI thread)."""
    folder = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms"
    names = sorted(p.stem.removeprefix("lib").removeprefix("q") for p in folder.glob("*")
                   if p.suffix in _PLUGIN_SUFFIXES)
    return QtAnswer(qVersion(), QGuiApplication.platformName(), tuple(names), live=True)


def summary(report: Report) -> str:
    """One line above the report: how much there is to fix."""
    problems = len(report.needing_fix(Level.PROBLEM))
    warnings = len(report.needing_fix(Level.WARNING))
    if not problems and not warnings:
        return f"Nothing to fix ({report.elapsed_s:.1f} s)."
    counts = ((problems, "problem"), (warnings, "warning"))
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in counts if n]
    return (f"{' and '.join(parts)}, each with its fix below. Copy report puts the details on the "
            "clipboard for a bug report.")


class ComputerCheckDialog(QDialog):
    """The doctor's report of this computer for ``config_source()``'s config.

    ``probes``: the machine as the checks see it (default: the real one, with this app's
    live Qt); a test passes a fake machine.
    """

    def __init__(self, config_source: Callable[[], EngineConfig], parent: QWidget | None = None, *,
                 probes: Probes | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("computerCheckDialog")
        self.setWindowTitle("Check this computer")
        self.resize(820, 620)
        self._config_source = config_source
        self._probes = probes
        self.report: Report | None = None
        self._lane = LatestLane(self, "parley-computer-check")
        self._build()
        self.check()

    def _build(self) -> None:
        self.status = QLabel("")
        self.status.setObjectName("computerCheckStatus")
        self.status.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setObjectName("computerCheckReport")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setAccessibleName("Report")
        self.text.setAccessibleDescription("what Parley found on this computer, and the fix of each problem")
        self.again = self._button("Check again", "computerCheckAgain", self.check)
        self.copy = self._button("Copy report", "computerCheckCopy", self.copy_report,
                                 "the report as JSON, for a bug report")
        close = self._button("Close", "computerCheckClose", self.reject)
        buttons = QHBoxLayout()
        buttons.addWidget(self.again)
        buttons.addWidget(self.copy)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.status)
        layout.addWidget(self.text, 1)
        layout.addLayout(buttons)

    def _button(self, text: str, name: str, slot: Callable[[], None], description: str = "") -> QPushButton:
        button = QPushButton(text)
        button.setObjectName(name)
        button.setAccessibleName(text)
        if description:
            button.setAccessibleDescription(description)
            button.setToolTip(description)
        button.setAutoDefault(False)
        button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        button.clicked.connect(lambda _checked=False: slot())
        return button

    # ------------------------------------------------------------------ checking
    def check(self) -> None:
        """Run every check off the GUI thread; the report replaces the one shown."""
        probes = self._probes or dataclasses.replace(Probes(), qt=_answer(live_qt()))
        config = self._config_source()
        self.status.setText("Checking this computer… (seconds: the backends' libraries are imported)")
        self.copy.setEnabled(False)
        self._lane.submit(Job(JobKind.CHECK_COMPUTER, lambda _task: run_checks(config, probes),
                              self._show, self._failed))

    def _show(self, report: Report) -> None:
        self.report = report
        self.text.setPlainText(render_text(report))
        self.status.setText(summary(report))
        self.copy.setEnabled(True)

    def _failed(self, failure: Failure) -> None:
        # run_checks reports a broken check in its section; reaching here is a bug.
        self.status.setText(f"The check could not run: {failure.message}")

    def copy_report(self) -> None:
        """The report's JSON (``parley-cli doctor --json``'s document) on the clipboard."""
        if self.report is not None:
            document = json.dumps(self.report.as_dict(), indent=2, ensure_ascii=False)
            QGuiApplication.clipboard().setText(document)

    @property
    def checking(self) -> bool:
        """True while a check runs or its report is on its way."""
        return self._lane.busy

    def done(self, result: int) -> None:
        """Closing drops a check still running (it ends on its own) and closes the lane."""
        self._lane.shutdown(JOIN_S)
        super().done(result)


def _answer(answer: QtAnswer) -> Callable[..., QtAnswer]:
    """The ``qt`` probe that gives the answer read on the GUI thread."""
    return lambda _env: answer


class ComputerCheck:
    """Help > Check this computer… of a window: ``action``, and ``dialog``, the report it
    opened (None while none is open). ``probes``: a fake machine for tests."""

    def __init__(self, window: WindowApi, probes: Probes | None = None) -> None:
        self._window = window
        self._probes = probes
        self.dialog: ComputerCheckDialog | None = None
        self.action = QAction("Check this computer…", window.widget)
        self.action.setObjectName("computerCheckAction")
        self.action.triggered.connect(lambda _checked=False: self.open())
        window.menus["help"].addAction(self.action)

    def open(self) -> ComputerCheckDialog:
        """Show the report dialog (raising the one already open)."""
        dialog = self.dialog
        if dialog is not None and dialog.isVisible():
            dialog.raise_()
            dialog.activateWindow()
            return dialog
        controller = self._window.controller
        dialog = ComputerCheckDialog(lambda: controller.config, self._window.widget, probes=self._probes)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(self._closed)
        self.dialog = dialog
        dialog.show()
        return dialog

    def _closed(self, _result: int) -> None:
        self.dialog = None


def install(window: WindowApi, probes: Probes | None = None) -> ComputerCheck:
    """Add "Check this computer…" to ``window.menus["help"]``; returns the
    ``ComputerCheck``. ``probes``: a fake machine for tests."""
    return ComputerCheck(window, probes)
