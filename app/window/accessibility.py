"""Keyboard reach and accessible names for the main window.

Every interactive control gets an accessible name: the ones made here by name, the rest
(panels built elsewhere, rows added while the app runs) from what a sighted user reads
next to them: the button's own text, the form label, the label before it in its row, or
its tooltip. ``name_unnamed`` runs when the window is built and whenever a tab is shown,
so rows added later are named before the user reaches them.
"""

from __future__ import annotations

import itertools
import re
from typing import cast

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QComboBox, QFormLayout,
                               QGridLayout, QHeaderView, QLabel, QLayout, QLayoutItem, QLineEdit, QMenuBar,
                               QPlainTextEdit,
                               QSlider, QTabBar, QTextEdit, QWidget)

#: The widget kinds a user operates (and the test walks).
INTERACTIVE = (QAbstractButton, QComboBox, QLineEdit, QAbstractSpinBox, QPlainTextEdit, QTextEdit,
               QSlider, QTabBar, QAbstractItemView)
_TAGS = re.compile(r"<[^>]+>")


def plain(text: str) -> str:
    """Label text for a screen reader: no markup, mnemonics or trailing ellipsis."""
    text = _TAGS.sub("", text or "").replace("&nbsp;", " ").replace("&&", "\0").replace("&", "")
    return " ".join(text.replace("\0", "&").split()).rstrip(":…").strip()


def interactive_widgets(root: QWidget) -> list[QWidget]:
    """The controls of ``root``'s window a user operates; the parts Qt builds inside a
    control (a spin box's line edit, a combo box's popup list, a table's header and corner
    button, a tab bar's scroll arrows) belong to that control and are left out."""
    out = []
    window = root.window()
    for w in root.findChildren(QWidget):
        if not isinstance(w, INTERACTIVE) or isinstance(w, QHeaderView) or w.window() is not window:
            continue
        parent = w.parentWidget()
        if isinstance(parent, (QAbstractSpinBox, QComboBox, QTabBar, QAbstractItemView, QMenuBar)):
            continue
        out.append(w)
    return out


def _widget_of(item: QLayoutItem | None) -> QWidget | None:
    return item.widget() if item is not None else None


def _layout_labels(layout: QLayout, found: dict[int, str]) -> None:
    """The label shown with each field of ``layout`` (and its nested layouts)."""
    if isinstance(layout, QFormLayout):
        for row in range(layout.rowCount()):
            label = _widget_of(layout.itemAt(row, QFormLayout.ItemRole.LabelRole))
            field = _widget_of(layout.itemAt(row, QFormLayout.ItemRole.FieldRole))
            if isinstance(label, QLabel) and field is not None:
                found.setdefault(id(field), label.text())
    elif isinstance(layout, QGridLayout):
        cells: dict[tuple[int, int], QWidget | None] = {}
        for i in range(layout.count()):
            # PySide6 returns (row, column, row span, column span); its stub says object.
            row, col, _rs, _cs = cast(tuple[int, int, int, int], layout.getItemPosition(i))
            cells[(row, col)] = _widget_of(layout.itemAt(i))
        for (row, col), w in cells.items():
            left = cells.get((row, col - 1))
            if w is not None and isinstance(left, QLabel) and left.text():
                found.setdefault(id(w), left.text())
    else:
        previous = None
        for i in range(layout.count()):
            w = _widget_of(layout.itemAt(i))
            if w is not None and isinstance(previous, QLabel) and previous.text():
                found.setdefault(id(w), previous.text())
            previous = w
    for i in range(layout.count()):
        item = layout.itemAt(i)
        child = item.layout() if item is not None else None
        if child is not None:
            _layout_labels(child, found)


def derived_name(w: QWidget, labels: dict[int, str]) -> str:
    """The name a user would give ``w`` from what the window shows around it."""
    if isinstance(w, QAbstractButton) and plain(w.text()):
        return plain(w.text())
    if id(w) in labels and plain(labels[id(w)]):
        return plain(labels[id(w)])
    if isinstance(w, QLineEdit) and w.placeholderText():
        return plain(w.placeholderText())
    tip = plain(w.toolTip()).split(". ")[0].split("\n")[0]
    if tip:
        return tip[:80]
    return ""


def name_unnamed(root: QWidget) -> list[QWidget]:
    """Give every unnamed control of ``root`` a derived accessible name; also let it be
    reached with Tab. Returns the controls still without a name (none, normally)."""
    labels: dict[int, str] = {}
    for label in root.findChildren(QLabel):
        buddy = label.buddy()
        if buddy is not None:
            labels.setdefault(id(buddy), label.text())
    for holder in [root, *root.findChildren(QWidget)]:
        layout = holder.layout()
        if layout is not None:
            _layout_labels(layout, labels)
    left = []
    for w in interactive_widgets(root):
        if not w.accessibleName():
            name = derived_name(w, labels)
            if name:
                w.setAccessibleName(name)
            else:
                left.append(w)
        if not w.focusPolicy() & Qt.FocusPolicy.TabFocus:
            w.setFocusPolicy(w.focusPolicy() | Qt.FocusPolicy.TabFocus)
    return left


def chain(*widgets: QWidget) -> None:
    """Tab order: each widget after the one before it."""
    for first, second in itertools.pairwise(widgets):
        QWidget.setTabOrder(first, second)
