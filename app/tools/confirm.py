"""Asking before a tool with side effects runs (or one that would send stored
conversations to a remote LLM): the engine's tool confirmer as a dialog.

``Engine.set_tool_confirmer`` takes a function it calls on its tool worker thread, which
may block until the user answers. ``ToolConfirmer`` is that function: it hands the
question to the GUI thread (a queued signal), where a ``ConfirmDialog`` opens without a
nested event loop (``QDialog.open``), and waits on a ``concurrent.futures.Future`` that
the dialog's answer resolves. Only the tool worker waits; the GUI thread never does.
Stopping the engine or closing the window declines every question still open
(``decline_all``, ``close``), so the engine's tool worker is free to end.
"""

from __future__ import annotations

import html
import json
import logging
import threading
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout,
                               QWidget)

from app.core.background import emit_safely

log = logging.getLogger("parley.app.tools")


def pretty_arguments(arguments: str) -> str:
    """A call's JSON arguments laid out one key a line (as written when not JSON)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    if value == {}:
        return "(no arguments)"
    return json.dumps(value, indent=2, ensure_ascii=False)


def why_asked(info) -> str:
    """Why the engine asks before ``info``'s tool runs, in one sentence."""
    if info.side_effects:
        return "It has side effects."
    return ("It returns your stored conversations, and the language model runs on a remote "
            "server, which would receive them.")


class ConfirmDialog(QDialog):
    """"Run this tool?": the tool's name, where it comes from, what it does, the arguments
    the assistant gave it; Run or Don't run (the default, and Esc)."""

    def __init__(self, call, info, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolConfirmDialog")
        self.setWindowTitle("Run a tool?")
        # Not modal: while it asks, Stop, Interrupt and the rest of the window still work.
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.call, self.info = call, info
        layout = QVBoxLayout(self)
        head = QLabel(f"The assistant wants to run <b>{html.escape(call.name)}</b> "
                      f"({html.escape(info.source)}).")
        head.setObjectName("confirmHead")
        head.setWordWrap(True)
        layout.addWidget(head)
        if info.description:
            about = QLabel(info.description)
            about.setObjectName("hint")
            about.setWordWrap(True)
            layout.addWidget(about)
        layout.addWidget(QLabel("With these arguments:"))
        self.arguments = QPlainTextEdit(pretty_arguments(call.arguments))
        self.arguments.setObjectName("toolArguments")
        self.arguments.setAccessibleName("The tool's arguments")
        self.arguments.setReadOnly(True)
        self.arguments.setMaximumHeight(140)
        layout.addWidget(self.arguments)
        note = QLabel(f"{why_asked(info)} Settings > Tools can let it run without asking.")
        note.setObjectName("hint")
        note.setWordWrap(True)
        layout.addWidget(note)
        buttons = QDialogButtonBox()
        role = QDialogButtonBox.ButtonRole
        self.run_button: QPushButton = buttons.addButton("Run", role.AcceptRole)
        self.decline_button: QPushButton = buttons.addButton("Don't run", role.RejectRole)
        self.decline_button.setDefault(True)  # Enter on a surprise dialog must not run it
        self.run_button.setAutoDefault(False)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.setMinimumWidth(420)


@dataclass(frozen=True, slots=True)
class _Question:
    call: Any  # ToolCall
    info: Any  # ToolInfo
    answer: Future


class ToolConfirmer(QObject):
    """The engine's tool confirmer (``confirm(call, info) -> bool``), answered by the user.

    Called on the engine's tool worker thread: it blocks there until the dialog on the GUI
    thread is answered (Run: True), or the window closes (False). ``asked`` is emitted on
    the GUI thread with each dialog it opens.
    """

    asked = Signal(object)  # the ConfirmDialog just opened
    _ask = Signal(object)  # a _Question, to the GUI thread

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self._parent = parent
        self._gui_thread = threading.current_thread()
        self._lock = threading.Lock()
        self._closed = False
        self._waiting: set[Future] = set()  # asked, not answered (under the lock)
        self._open: dict[int, ConfirmDialog] = {}  # GUI thread: the dialogs shown, by id(answer)
        self._ask.connect(self._show, Qt.ConnectionType.QueuedConnection)

    @property
    def dialogs(self) -> list[ConfirmDialog]:
        """The dialogs open now (GUI thread)."""
        return list(self._open.values())

    def __call__(self, call, info) -> bool:
        """Ask the user whether ``call`` of the tool ``info`` may run; True: Run."""
        if threading.current_thread() is self._gui_thread:
            # Waiting here would freeze the window and never see the answer.
            log.error("the tool confirmer was called on the GUI thread; %s declined", call.name)
            return False
        answer: Future = Future()
        with self._lock:
            if self._closed:
                return False
            self._waiting.add(answer)
        try:
            if not emit_safely(self._ask, _Question(call, info, answer)):
                return False  # the window is gone
            return bool(answer.result())
        finally:
            with self._lock:
                self._waiting.discard(answer)

    def _show(self, question: _Question) -> None:
        """On the GUI thread: the dialog for ``question``, answered when it closes."""
        if question.answer.done():
            return  # declined by close() on its way here
        dialog = ConfirmDialog(question.call, question.info, self._parent)
        self._open[id(question.answer)] = dialog
        dialog.finished.connect(
            lambda result: self._answer(question.answer, result == QDialog.DialogCode.Accepted))
        dialog.open()
        self.asked.emit(dialog)

    def _answer(self, answer: Future, run: bool) -> None:
        dialog = self._open.pop(id(answer), None)
        _resolve(answer, run)
        if dialog is not None:
            dialog.deleteLater()

    def decline_all(self) -> None:
        """Decline every question open now and close its dialog (GUI thread): the engine
        stops, and its tool worker must not wait for an answer nobody will use."""
        with self._lock:
            waiting = list(self._waiting)
        for answer in waiting:
            _resolve(answer, False)
        for dialog in list(self._open.values()):
            dialog.reject()

    def close(self) -> None:
        """The window closes: every question still open is declined, and none is asked again."""
        with self._lock:
            self._closed = True
        self.decline_all()


def _resolve(answer: Future, value: bool) -> None:
    try:
        answer.set_result(value)
    except InvalidStateError:  # answered already (the dialog and the close both ended it)
        pass
