"""Widgets more than one feature shows: the bar and level meters (the header's microphone
level, the device check's), the read-only tables of the Server and Benchmark tabs, and
``set_available`` (a control enabled when it can act, its tooltip saying why not)."""

from __future__ import annotations

import math

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QAction, QColor, QPainter, QStandardItemModel
from PySide6.QtWidgets import (QAbstractItemView, QApplication, QComboBox, QGridLayout, QHeaderView, QLabel,
                               QLayout, QMessageBox, QTableWidget, QTableWidgetItem, QWidget)

from app.core import theme
from engine.audio.pcm import dbfs

_TABLE_STYLE = ("QTableWidget { background: #ffffff; border: 1px solid #dde2e8; border-radius: 6px;"
                " gridline-color: #eef1f5; }"
                "QTableWidget::item { padding: 0 8px; }"
                "QHeaderView::section { background: #f6f7f9; color: #52606d; border: none;"
                " border-bottom: 1px solid #dde2e8; padding: 4px 8px; font-weight: 600; }")


class BarMeter(QWidget):
    """A rounded horizontal bar: ``value`` (0..1) over a track, optionally a lighter
    ``secondary`` value behind it (e.g. a whole GPU's use behind this process's)."""

    def __init__(self, color: str = "accent", parent: QWidget | None = None, height: int = 10) -> None:
        super().__init__(parent)
        self.value = 0.0
        self.secondary: float | None = None
        # A palette reference ("good", "stage:llm", "series:2") or "#rrggbb", resolved at
        # paint time so a theme switch repaints in the new colours.
        self.color_ref = color
        self._height = height
        self.setMinimumWidth(60)
        self.setFixedHeight(height)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """Wide enough to read, as tall as asked."""
        return QSize(160, self._height)

    def set_value(self, value: float, secondary: float | None = None, color: str | None = None) -> None:
        """Show ``value`` (clamped to 0..1)."""
        value = min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0
        if color is not None and color != self.color_ref:
            self.color_ref = color
        else:
            color = None
        if value != self.value or secondary != self.secondary or color is not None:
            self.value, self.secondary = value, secondary
            self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        """The track, the secondary value, the value."""
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        r = QRectF(self.rect())
        radius = r.height() / 2
        p.setBrush(theme.color("track"))
        bar = theme.color(self.color_ref)
        p.drawRoundedRect(r, radius, radius)
        if self.secondary:
            light = QColor(bar)
            light.setAlpha(70)
            p.setBrush(light)
            p.drawRoundedRect(QRectF(r.x(), r.y(), r.width() * min(self.secondary, 1.0), r.height()),
                              radius, radius)
        if self.value > 0:
            p.setBrush(bar)
            p.drawRoundedRect(QRectF(r.x(), r.y(), max(r.height(), r.width() * self.value), r.height()),
                              radius, radius)


class LevelMeter(QWidget):
    """The microphone level in dBFS (−60..0), with a muted look while push-to-talk is up."""

    FLOOR_DB = -60.0

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setHorizontalSpacing(8)
        self.bar = BarMeter("good", height=8)
        self.bar.setMinimumWidth(120)
        self.text = QLabel("mic off")
        self.text.setObjectName("meterText")
        self.text.setMinimumWidth(86)
        title = QLabel("Mic")
        title.setObjectName("meterTitle")
        layout.addWidget(title, 0, 0)
        layout.addWidget(self.bar, 0, 1)
        layout.addWidget(self.text, 0, 2)
        self.db = self.FLOOR_DB

    def set_level(self, rms: float, active: bool, passing: bool = True) -> None:
        """``rms`` 0..1 of the latest block; ``active`` False when no microphone is open.

        Clamped to the scale: anything above full scale (a faulty device, an infinity)
        shows 0 dB, anything below the floor (or NaN) the floor.
        """
        if not active:
            self.db = self.FLOOR_DB
            self.bar.set_value(0.0)
            self.text.setText("mic off")
            return
        self.db = min(0.0, dbfs(rms, self.FLOOR_DB))
        fraction = (self.db - self.FLOOR_DB) / -self.FLOOR_DB
        color = "bad" if self.db > -3 else "warn" if self.db > -12 else "good"
        self.bar.set_value(fraction, color=color if passing else "muted")
        self.text.setText(f"{self.db:.0f} dB" + ("" if passing else " · muted"))


def data_table(columns: tuple[str, ...], name: str, accessible: str, stretch: int) -> QTableWidget:
    """A read-only table of ``columns`` (no selection, no grid, reached with Tab) whose
    column ``stretch`` takes the spare width; the other columns fit their contents."""
    table = QTableWidget(0, len(columns))
    table.setObjectName(name)
    table.setAccessibleName(accessible)
    table.setHorizontalHeaderLabels(columns)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.setFocusPolicy(Qt.FocusPolicy.TabFocus)
    table.setAlternatingRowColors(False)
    table.setShowGrid(False)
    table.setWordWrap(False)
    table.setStyleSheet(_TABLE_STYLE)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    header.setMinimumSectionSize(64)
    header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    header.setHighlightSections(False)
    return table


def set_row(table: QTableWidget, row: int, values: list[str], tips: dict[int, str] | None = None) -> None:
    """Show ``values`` in ``row`` (and ``tips`` by column), touching only the cells that
    changed: a table redrawn at 10 Hz keeps its items."""
    for col, text in enumerate(values):
        item = table.item(row, col)
        if item is None:
            item = QTableWidgetItem()
            table.setItem(row, col, item)
        if item.text() != text:
            item.setText(text)
        tip = (tips or {}).get(col, "")
        if item.toolTip() != tip:
            item.setToolTip(tip)


def set_item_enabled(combo: QComboBox, index: int, *, enabled: bool) -> None:
    """Enable or grey out entry ``index`` of ``combo`` (a combo's own model is a
    QStandardItemModel; one given another model says so)."""
    model = combo.model()
    if not isinstance(model, QStandardItemModel):
        raise TypeError(f"{combo.objectName() or 'the combo'} has a {type(model).__name__}, "
                        "not its own QStandardItemModel: its entries cannot be greyed out")
    model.item(index).setEnabled(enabled)


def clear_layout(layout: QLayout) -> None:
    """Take every item out of ``layout``; its widgets are deleted (later, as Qt asks)."""
    while layout.count():
        item = layout.takeAt(0)
        widget = item.widget() if item is not None else None
        if widget is not None:
            widget.deleteLater()


def application() -> QApplication:
    """The running QApplication (every widget lives under one)."""
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        raise RuntimeError(f"no QApplication is running (the instance is {app!r})")
    return app


def confirm(parent: QWidget, title: str, text: str) -> bool:
    """Ask Yes/Cancel before something that cannot be undone (Cancel is the default)."""
    answer = QMessageBox.question(parent, title, text,
                                  QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                                  QMessageBox.StandardButton.Cancel)
    return answer == QMessageBox.StandardButton.Yes


def set_available(widget: QWidget | QAction, why_not: str | None, tip: str) -> None:
    """Enable ``widget`` when ``why_not`` is None (its tooltip then says what it does,
    ``tip``), else disable it with ``why_not`` as its tooltip: a control that cannot act
    says why. Only a change is written (called at 10 Hz)."""
    enabled = why_not is None
    if widget.isEnabled() != enabled:
        widget.setEnabled(enabled)
    text = tip if enabled else why_not
    if widget.toolTip() != text:
        widget.setToolTip(text)
