"""Type instead of talk: the message box under the conversation and its "Reply in text
only" toggle.

Enter sends, Shift+Enter starts a new line, Up in an empty box brings the last message
back. A message sent is answered like a spoken turn (``EngineController.say``, on the
controller's serial lane: the GUI thread never waits), spoken unless the toggle is on.
The box and Send are enabled only while the conversation runs; their tooltip says why
not otherwise.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.core.saved_settings import set_ui_value, ui_value
from app.core.widgets import set_available

BOX_TIP = "Type a message to Parley: Enter sends, Shift+Enter starts a new line, Up recalls the last one"
SEND_TIP = "Send the message (Enter)"
#: The box grows with its text up to this many lines, then scrolls.
MAX_LINES = 5


class MessageBox(QPlainTextEdit):
    """A plain-text box: Enter emits ``submitted``, Shift+Enter is a new line, Up in an
    empty box recalls ``last``."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBox")
        self.setAccessibleName("Message to Parley")
        self.setPlaceholderText("Type a message… (Enter sends)")
        self.setTabChangesFocus(True)  # Tab leaves the box, as in every other field
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.last = ""  # the last message sent, for Up
        self.document().contentsChanged.connect(self._fit)
        self._fit()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        """Enter sends, Shift+Enter breaks the line, Up in an empty box recalls."""
        key, shift = event.key(), bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if shift:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if key == Qt.Key.Key_Up and not self.toPlainText() and self.last:
            self.setPlainText(self.last)
            self.moveCursor(self.textCursor().MoveOperation.End)
            return
        super().keyPressEvent(event)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        """A new stylesheet or font changes the frame and the line: fit again (a box fitted
        before the window's stylesheet reached it was shorter than one line)."""
        super().changeEvent(event)
        if event.type() in (QEvent.Type.StyleChange, QEvent.Type.FontChange):
            self._fit()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self._fit()

    def _fit(self) -> None:
        # As tall as its text (one to MAX_LINES lines): a short message keeps the view big.
        # (A plain-text document's height is counted in lines.)
        lines = max(1, min(MAX_LINES, int(self.document().size().height())))
        line = self.fontMetrics().lineSpacing()
        # frameWidth covers the stylesheet's border and padding.
        height = lines * line + 2 * int(self.document().documentMargin()) + 2 * self.frameWidth()
        if self.height() != height:
            self.setFixedHeight(height)


class Composer(QWidget):
    """The message box, Send, and "Reply in text only" (saved as ``ui/text_only_reply``).
    ``send`` carries the text and whether the reply is spoken."""

    send = Signal(str, bool)  # text, spoken

    def __init__(self, settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.settings = settings
        self.box = MessageBox()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.setAccessibleName("Send the message")
        self.text_only = QCheckBox("Reply in text only")
        self.text_only.setObjectName("textOnlyReply")
        self.text_only.setToolTip("Parley writes its replies to typed messages without speaking them")
        self.text_only.setChecked(ui_value(settings, "text_only_reply", False))
        self.text_only.toggled.connect(lambda on: set_ui_value(settings, "text_only_reply", on))
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 8, 0, 0)
        row.setSpacing(8)
        row.addWidget(self.box, 1)
        side = QVBoxLayout()
        side.setSpacing(4)
        side.addWidget(self.send_button)
        side.addWidget(self.text_only)
        side.addStretch(1)
        row.addLayout(side)
        self.box.submitted.connect(self.submit)
        self.send_button.clicked.connect(self.submit)
        self.why_not: str | None = None
        self.set_why_not("No models are loaded yet: wait for loading to finish")

    def set_why_not(self, why_not: str | None) -> None:
        """Enable the box and Send (``why_not`` None) or disable them saying why."""
        self.why_not = why_not
        set_available(self.box, why_not, BOX_TIP)
        set_available(self.send_button, why_not, SEND_TIP)

    def submit(self) -> None:
        """Send the box's text (nothing when it is blank or sending is not possible)."""
        text = self.box.toPlainText().strip()
        if not text or self.why_not is not None:
            return
        self.box.last = text
        self.box.clear()
        self.send.emit(text, not self.text_only.isChecked())

    def restore(self, text: str) -> None:
        """A message that could not be sent comes back into an empty box."""
        if not self.box.toPlainText():
            self.box.setPlainText(text)
