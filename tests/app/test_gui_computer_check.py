"""Help > Check this computer… (app.onboarding.computer_check): the doctor's report in a
window, checked on a lane off the GUI thread, on a fake machine (``tests.support.doctor``)
so that it is fast and says the same everywhere; the app's own Qt read live."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMainWindow, QMenu

from app.core.bridge import EventBridge
from app.core.controller import EngineController
from app.onboarding.computer_check import ComputerCheckDialog, install, live_qt
from engine.config import EngineConfig
from engine.doctor.readings import AudioScan
from engine.doctor.run import SECTIONS
from tests.support.doctor import healthy_probes
from tests.support.threads import parley_threads

WAIT_MS = 20_000


class _Window(QMainWindow):
    """What ``install`` needs of MainWindow (``WindowApi``): a Help menu and a controller."""

    def __init__(self, controller) -> None:
        super().__init__()
        self.controller = controller
        self.menus = {"help": self.menuBar().addMenu("&Help")}

    @property
    def widget(self) -> QMainWindow:
        return self


@pytest.fixture
def controller(qapp):
    controller = EngineController(EngineConfig(), EventBridge())
    yield controller
    controller.shutdown()


def _lane_threads() -> list[str]:
    return [t for t in parley_threads() if t == "parley-computer-check"]


def test_the_help_action_opens_the_report_checked_off_the_gui_thread(qtbot, controller):
    threads: list[threading.Thread] = []
    release = threading.Event()

    def cpu():  # the first probe: held until the dialog has been seen waiting
        threads.append(threading.current_thread())
        release.wait(10)
        return healthy_probes().cpu()

    window = _Window(controller)
    qtbot.addWidget(window)
    probes = dataclasses.replace(healthy_probes(), cpu=cpu)
    check = install(window, probes)
    help_menu: QMenu = window.menus["help"]
    assert [a.text() for a in help_menu.actions()] == ["Check this computer…"]
    assert check.dialog is None

    check.action.trigger()
    dialog = check.dialog
    assert isinstance(dialog, ComputerCheckDialog) and dialog.isVisible()
    assert dialog.checking and dialog.report is None  # the GUI thread did not wait for it
    assert "Checking this computer" in dialog.status.text() and not dialog.copy.isEnabled()
    assert check.open() is dialog  # raised, not a second one
    release.set()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
    assert threads and threads[0] is not threading.main_thread()
    text = dialog.text.toPlainText()
    for title in SECTIONS.values():
        assert f"\n{title}\n" in f"\n{text}", title
    assert dialog.status.text().startswith("Nothing to fix")

    dialog.copy.click()
    copied = json.loads(QGuiApplication.clipboard().text())
    assert [s["key"] for s in copied["sections"]] == list(SECTIONS) and copied["problems"] == []
    dialog.reject()
    assert check.dialog is None
    qtbot.waitUntil(lambda: not _lane_threads(), timeout=WAIT_MS)


def test_a_problem_is_shown_with_its_fix_and_check_again_reads_anew(qtbot, controller):
    scans = iter([AudioScan(missing="portaudio"), healthy_probes().audio(EngineConfig())])
    probes = dataclasses.replace(healthy_probes(), audio=lambda config: next(scans))
    dialog = ComputerCheckDialog(lambda: controller.config, probes=probes)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
    assert dialog.status.text().startswith("1 problem, each with its fix below")
    text = dialog.text.toPlainText()
    assert "[PROBLEM] the PortAudio library is not installed" in text
    assert "fix: sudo apt install libportaudio2" in text
    first = dialog.report
    dialog.again.click()
    qtbot.waitUntil(lambda: dialog.report is not first, timeout=WAIT_MS)
    assert dialog.status.text().startswith("Nothing to fix")
    dialog.reject()
    qtbot.waitUntil(lambda: not _lane_threads(), timeout=WAIT_MS)


def test_the_app_reads_its_own_qt(qapp):
    answer = live_qt()
    assert answer.live and answer.platform == QGuiApplication.platformName() == "offscreen"
    assert answer.qt.startswith("6.") and "offscreen" in answer.plugins
