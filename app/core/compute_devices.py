"""Compute devices in a dropdown, alike on the Settings and Benchmark tabs: every device
discovery reported, the ones a stage cannot use disabled with the reason as tooltip."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from app.core.widgets import set_item_enabled
from engine.runtime.devices import DeviceInfo


def add_device_items(combo: QComboBox, infos: Iterable[DeviceInfo], kinds: set[str] | None = None,
                     who: str = "") -> None:
    """Append one item per device (data: the device string). ``kinds``: the device kinds
    ``who`` (the stage's backend, as a phrase) runs on; None: any."""
    for info in infos:
        combo.addItem(info.label, str(info.device))
        i = combo.count() - 1
        why = None
        if not info.available:
            why = f"{info.device} is not available: {info.reason or 'not present'}"
        elif kinds is not None and info.device.kind not in kinds:
            runs_on = ", ".join(sorted(kinds)) or "nothing here"
            why = f"{who} does not run on {info.device.kind}; it runs on {runs_on}"
        set_item_enabled(combo, i, enabled=why is None)
        combo.setItemData(i, why or info.label, Qt.ItemDataRole.ToolTipRole)
