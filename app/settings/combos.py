"""How the settings panel fills its device and model dropdowns from discovery and the
backend registry: a device the chosen backend cannot use, or that is not present, is
listed disabled with the reason as its tooltip."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox

from app.core.compute_devices import add_device_items
from app.core.widgets import set_item_enabled
from app.settings.groups import AUTO
from engine.backends import BackendRegistry
from engine.runtime.devices import DeviceInfo


def supported_kinds(registry: BackendRegistry, stage: str, backend: str | None) -> tuple[set[str], str]:
    """Device kinds ``stage``'s chosen ``backend`` (None or ``auto``: any installed one)
    runs on, and a phrase naming it."""
    if backend and backend != AUTO:
        spec = registry.get(stage, backend)
        return set(spec.devices), spec.name
    specs = [s for s in registry.specs(stage) if s.missing_package() is None]
    return {k for s in specs for k in s.devices}, f"no installed {stage} backend"


def fill_device_combo(combo: QComboBox, infos: list[DeviceInfo], current: str, discovered: bool,
                      kinds: set[str] | None = None, who: str = "") -> None:
    """Fill a device dropdown with ``infos`` without emitting a change, keeping its choice
    (else ``current``). ``kinds``/``who``: the device kinds the stage's backend runs on
    (None: any). ``discovered``: discovery has answered, so a device it did not report is
    "(not found)" rather than still being looked for."""
    wanted = combo.currentData() if combo.count() else current
    combo.blockSignals(True)
    combo.clear()
    combo.addItem("auto — best available", AUTO)
    add_device_items(combo, infos, kinds, who)
    index = combo.findData(wanted)
    if index < 0:  # a setting naming a device discovery did not report: keep it visible
        combo.addItem(f"{wanted} (not found)" if discovered else wanted, wanted)
        index = combo.count() - 1
        set_item_enabled(combo, index, enabled=not discovered)  # else: still discovering
    combo.setCurrentIndex(index)
    combo.blockSignals(False)


def fill_models(combo: QComboBox, registry: BackendRegistry, stage: str, backend: str | None,
                current: str) -> None:
    """The hub models ``stage``'s ``backend`` knows (any backend's for ``auto``), and
    ``current``, chosen; without emitting a change. The VAD's model is its backend's."""
    combo.blockSignals(True)
    combo.clear()
    if stage == "vad":
        combo.addItem("built into the backend", AUTO)
        combo.setEnabled(False)
        combo.blockSignals(False)
        return
    combo.addItem(AUTO, AUTO)
    specs = registry.specs(stage) if backend in (None, AUTO) else [registry.get(stage, backend)]
    for model_id in dict.fromkeys(m for s in specs for m in s.hub_models.values()):
        combo.addItem(model_id, model_id)
    if combo.findText(current) < 0:
        combo.addItem(current, current)
    combo.setCurrentIndex(combo.findText(current))
    combo.setToolTip("auto picks the hub default if it is cached or reachable, else the "
                     "bundled offline model; or type a model id or a local folder")
    combo.blockSignals(False)
