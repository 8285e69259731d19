"""What the conversation shows besides the words: a row per tool call the assistant made
(its name, the MCP server that answered it if one did, arguments, result and time taken;
a failed call in the error colour), and the
marker where the history the prompt carries as a summary ends, its summary shown on a
click.

The rows are built from ``ToolCallStarted``/``ToolCallFinished`` and the marker from
``HistorySummarized`` (``engine.pipeline.events``, through ``app.core.bridge``).
"""

from __future__ import annotations

import html
import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget

from app.core import theme

#: Longer arguments and results are cut in the row (the tooltip has them whole).
SHOWN_CHARS = 160


def _short(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_text(text: str) -> str:
    """A call's JSON arguments or result as ``key=value, …``; other text as it is."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return text
    if not isinstance(value, dict):
        return text
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in value.items())


class ToolCallRow(QLabel):
    """One tool call: "running" from its start, then its result (or error) and time.
    ``server``: the MCP server that runs the tool (``ToolInfo.server``), empty for a
    built-in or a user tool; the row names it ("read_note · notes (MCP)")."""

    def __init__(self, call, parent: QWidget | None = None, *, server: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("toolCallRow")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.call = call
        self.server = server
        self.result: str | None = None  # None while it runs
        self.error: str | None = None
        self.seconds: float | None = None
        self.render()

    @property
    def running(self) -> bool:
        """True until the call's ``ToolCallFinished`` arrived."""
        return self.result is None and self.error is None

    def finish(self, result: str, error: str | None, seconds: float) -> None:
        """The call ended: ``error`` None means it worked."""
        self.result, self.error, self.seconds = result, error, seconds
        self.render()

    @property
    def label(self) -> str:
        """The tool's name, and the MCP server that answered: "read_note · notes (MCP)"."""
        return f"{self.call.name} · {self.server} (MCP)" if self.server else self.call.name

    def summary(self) -> str:
        """The row as plain text (tests, copying)."""
        head = f"{self.call.name}({json_text(self.call.arguments)})"
        if self.server:
            head = f"{self.label} ({json_text(self.call.arguments)})"
        if self.running:
            return f"{head} running…"
        outcome = f"error: {self.error}" if self.error is not None else f"-> {json_text(self.result or '')}"
        return f"{head} {outcome} ({self.seconds:.2f} s)"

    def render(self) -> None:
        """Draw the row in the current palette."""
        palette = theme.current()
        args = json_text(self.call.arguments)
        server = (f" <span style='color:{palette.muted}'>· {html.escape(self.server)} (MCP)</span>"
                  if self.server else "")
        name = html.escape(self.call.name)
        head = (f"<span style='color:{palette.muted}'>Tool</span> <b>{name}</b>{server}"
                f"<span style='color:{palette.muted}'>({html.escape(_short(args))})</span>")
        if self.running:
            text = f"{head} <i style='color:{palette.muted}'>running…</i>"
        elif self.error is not None:
            text = (f"{head} <span style='color:{palette.error_text}'>failed: "
                    f"{html.escape(_short(self.error))}</span>")
        else:
            text = f"{head} → {html.escape(_short(json_text(self.result or '')))}"
        if self.seconds is not None:
            text += f" <span style='color:{palette.muted}'>· {self.seconds:.2f} s</span>"
        self.setText(text)
        self.setToolTip(self.summary())
        self.setAccessibleName(f"Tool call: {self.summary()}")


class SummaryMarker(QWidget):
    """A divider after the last turn the prompt carries as a summary; "Show summary"
    opens the summary under it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("summaryMarker")
        self.summary = ""
        self.through_turn = 0
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 6)
        layout.setSpacing(4)
        self.toggle = QToolButton()
        self.toggle.setObjectName("summaryToggle")
        self.toggle.setCheckable(True)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setAccessibleName("Show the summary of the earlier turns")
        self.toggle.toggled.connect(self._toggled)
        self.text = QLabel()
        self.text.setObjectName("summaryText")
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.hide()
        layout.addWidget(self.toggle)
        layout.addWidget(self.text)

    @property
    def expanded(self) -> bool:
        """True while the summary shows."""
        return self.toggle.isChecked()

    def set_summary(self, summary: str, through_turn: int) -> None:
        """The prompt now carries ``summary`` for every turn up to ``through_turn``."""
        self.summary, self.through_turn = summary, through_turn
        self.toggle.setText("Above: the turns Parley now remembers as a summary")
        self.toggle.setToolTip("Parley's prompt carries these turns as a summary, not word for word: "
                               "click to read it")
        self.text.setText(summary)

    def _toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName("Hide the summary of the earlier turns" if on
                                      else "Show the summary of the earlier turns")
        self.text.setVisible(on)
