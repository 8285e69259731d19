"""The doctor's desktop check: whether PySide6 is installed and Qt's platform plugin starts.

The engine never imports Qt: the real probe starts Qt in a child Python
(``engine.doctor.system.start_qt``), and the app passes what its own running Qt says.
"""

from __future__ import annotations

import re

from engine.doctor.probes import Probes
from engine.doctor.readings import QtAnswer
from engine.doctor.report import Finding, Section, info, ok, problem, warning
from engine.doctor.system import first_platform

_MISSING_LIBRARY = re.compile(r"(\S+?\.so[\w.]*):\s*cannot open shared object file")
#: The library Qt's xcb plugin most often lacks on a bare system, and where it comes from.
_KNOWN_PACKAGES = {"libxcb-cursor.so.0": "sudo apt install libxcb-cursor0 (Fedora: sudo dnf install "
                                         "xcb-util-cursor; Arch: sudo pacman -S xcb-util-cursor)"}
_HEADLESS = ("offscreen", "minimal", "vnc")
_REINSTALL = "pip install --force-reinstall 'parley[gui]'"


def _missing_library(library: str, what: str) -> Finding:
    fix = _KNOWN_PACKAGES.get(library, f"install the system package that provides {library} (parley "
                                       "names it for this distribution when it starts)")
    return problem(f"{what} needs {library}, which is not installed: the window cannot open", fix)


def _load_problem(answer: QtAnswer, plugin: str) -> Finding:
    missing = _MISSING_LIBRARY.search(answer.load_error)
    if missing is None:
        return problem(f"Qt's {plugin!r} platform plugin does not load: {answer.load_error}",
                       f"run QT_DEBUG_PLUGINS=1 parley to see what it lacks, or reinstall: {_REINSTALL}")
    return _missing_library(missing.group(1), f"Qt's {plugin!r} platform plugin")


def _start_problem(answer: QtAnswer, asked: str, env_display: str) -> Finding:
    missing = _MISSING_LIBRARY.search(answer.error)
    if missing is not None:  # Qt itself did not load (PySide6's own libraries)
        return _missing_library(missing.group(1), "Qt")
    if asked and answer.plugins and asked not in answer.plugins:
        return problem(f"QT_QPA_PLATFORM={asked} names a platform plugin Qt does not have",
                       f"unset QT_QPA_PLATFORM, or set it to one of: {', '.join(answer.plugins)}")
    if "could not connect to display" in answer.error or "no display" in answer.error.lower():
        where = f"DISPLAY={env_display}" if env_display else "DISPLAY is not set"
        return warning(f"Qt finds no display to open the window on ({where})",
                       "start Parley in a desktop session; without one use parley-cli, or "
                       "QT_QPA_PLATFORM=offscreen parley --self-test")
    return problem(f"Qt does not start: {answer.error}",
                   f"run QT_DEBUG_PLUGINS=1 parley to see what fails, or reinstall: {_REINSTALL}")


def check_qt(probes: Probes) -> Section:
    """PySide6 installed, and Qt started with the platform plugin it picks here."""
    asked = probes.env.get("QT_QPA_PLATFORM", "")
    facts: dict = {"installed": probes.installed("PySide6"), "qt_qpa_platform": asked or None}
    if not facts["installed"]:
        return Section("qt", "Desktop (Qt)", (warning(
            "PySide6 is not installed: the desktop app (parley) cannot start; parley-cli works "
            "without it", "pip install 'parley[gui]'"),), facts)
    answer = probes.qt(probes.env)
    if answer is None:
        return Section("qt", "Desktop (Qt)", (info(
            "the packaged app carries its own Qt: Help > Check this computer in the app checks it"),),
            facts)
    facts.update(qt=answer.qt or None, platform=answer.platform or None, plugins=list(answer.plugins),
                 load_error=answer.load_error or None, error=answer.error or None, live=answer.live)
    findings: list[Finding] = []
    plugin = first_platform(probes.env, probes.system) or "default"
    if answer.load_error:
        findings.append(_load_problem(answer, plugin))
    elif answer.platform:
        where = " (this window)" if answer.live else ""
        findings.append(ok(f"Qt {answer.qt} starts with the {answer.platform!r} platform plugin{where}"))
        if answer.platform in _HEADLESS:
            findings.append(info(f"QT_QPA_PLATFORM={asked or answer.platform}: the window is drawn "
                                 "off screen (tests, headless runs)"))
    else:
        findings.append(_start_problem(answer, asked.split(":")[0].strip(), probes.env.get("DISPLAY", "")))
    findings += [info(note) for note in answer.notes]
    return Section("qt", "Desktop (Qt)", tuple(findings), facts)
