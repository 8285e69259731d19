"""Editors for config fields, made from the field's type and metadata (min, max, help).

The settings panel uses these for every setting it does not lay out by hand, so a new
EngineConfig field appears in the GUI without GUI code.
"""

from __future__ import annotations

import enum
from typing import Any

from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QLineEdit, QSpinBox, QWidget)

_INT_LIMIT = 2**31 - 1


def make_editor(dotted: str, field, tp: type) -> QWidget:
    """A widget that edits one setting, bounded by its metadata, its help as tooltip."""
    meta = field.metadata or {}
    lo, hi = meta.get("min"), meta.get("max")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        w = QComboBox()
        for member in tp:
            w.addItem(member.value, member)
    elif tp is bool:
        w = QCheckBox()
    elif tp is int:
        w = QSpinBox()
        w.setRange(int(lo) if lo is not None else -_INT_LIMIT, int(hi) if hi is not None else _INT_LIMIT)
    elif tp is float:
        w = QDoubleSpinBox()
        w.setRange(float(lo) if lo is not None else -1e9, float(hi) if hi is not None else 1e9)
        span = (hi - lo) if lo is not None and hi is not None else 100.0
        w.setDecimals(2 if span >= 1 else 3)
        w.setSingleStep(0.05 if span <= 5 else 0.5)
    else:
        w = QLineEdit()
    help_text = meta.get("help", "")
    bounds = f" ({lo} to {hi})" if lo is not None and hi is not None else ""
    w.setToolTip(f"{dotted}: {help_text}{bounds}")
    w.setObjectName(f"field:{dotted}")
    # Screen readers announce the field's label; a panel that shows another label sets it.
    w.setAccessibleName(field_label(dotted))
    w.setAccessibleDescription(help_text)
    w.setProperty("dotted", dotted)
    return w


def editor_value(w: QWidget) -> Any:
    """The value an editor holds, typed as its field (an enum member for enums)."""
    if isinstance(w, QComboBox):
        return w.currentData()
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, (QSpinBox, QDoubleSpinBox)):
        return w.value()
    if isinstance(w, QLineEdit):
        return w.text()
    raise TypeError(f"not a field editor: {w!r}")


def set_editor_value(w: QWidget, value: Any) -> None:
    """Show ``value`` in an editor made by ``make_editor``."""
    if isinstance(w, QComboBox):
        index = w.findData(value)
        w.setCurrentIndex(max(index, 0))
    elif isinstance(w, QCheckBox):
        w.setChecked(bool(value))
    elif isinstance(w, QSpinBox):
        w.setValue(int(value))
    elif isinstance(w, QDoubleSpinBox):
        w.setValue(float(value))
    elif isinstance(w, QLineEdit):
        w.setText(str(value))
        w.setCursorPosition(0)
    else:
        raise TypeError(f"not a field editor: {w!r}")


def field_label(dotted: str) -> str:
    """A readable label: ``min_silence_ms`` -> ``Min silence (ms)``."""
    name = dotted.rpartition(".")[2]
    unit = ""
    for suffix, text in (("_ms", "ms"), ("_s", "s")):
        if name.endswith(suffix):
            name, unit = name[: -len(suffix)], text
            break
    words = name.replace("_", " ")
    words = words.replace("llm", "LLM").replace("stt", "STT").replace("tts", "TTS")
    words = words[:1].upper() + words[1:]
    return f"{words} ({unit})" if unit else words
