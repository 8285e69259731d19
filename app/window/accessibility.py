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

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QComboBox, QFormLayout,
                               QGridLayout, QHeaderView, QLabel, QLayout, QLineEdit, QMenuBar, QPlainTextEdit,
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


def _layout_labels(layout: QLayout, found: dict[int, str]) -> None:
    """The label shown with each field of ``layout`` (and its nested layouts)."""
    if isinstance(layout, QFormLayout):
        for row in range(layout.rowCount()):
            label = layout.itemAt(row, QFormLayout.ItemRole.LabelRole)
            field = layout.itemAt(row, QFormLayout.ItemRole.FieldRole)
            if label and field and isinstance(label.widget(), QLabel) and field.widget():
                found.setdefault(id(field.widget()), label.widget().text())
    elif isinstance(layout, QGridLayout):
        cells = {}
        for i in range(layout.count()):
            row, col, _rs, _cs = layout.getItemPosition(i)
            cells[(row, col)] = layout.itemAt(i).widget()
        for (row, col), w in cells.items():
            left = cells.get((row, col - 1))
            if w is not None and isinstance(left, QLabel) and left.text():
                found.setdefault(id(w), left.text())
    else:
        previous = None
        for i in range(layout.count()):
            w = layout.itemAt(i).widget()
            if w is not None and isinstance(previous, QLabel) and previous.text():
                found.setdefault(id(w), previous.text())
            previous = w
    for i in range(layout.count()):
        child = layout.itemAt(i).layout()
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
        if holder.layout() is not None:
            _layout_labels(holder.layout(), labels)
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
