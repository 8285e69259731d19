"""The settings panel: per-stage backend, model and device; the global device; microphone
and speaker; progressive transcription; the tools (``app.settings.tools_group``); every
other EngineConfig field under Advanced, but ``units``: several pipeline units run only in
realtime mode, set on the Server tab.

Device dropdowns list exactly what discovery reports; a device that is not present, or
that the chosen backend cannot use, is disabled with a tooltip saying why. A stage whose
``base_url`` is set (STT, LLM, TTS) also lists its server as ``remote: host · server ·
model``, probed off the GUI thread (when the panel shows a config, and again shortly
after its base_url, key variable, backend or model is edited): a server that does not
answer, refuses the key or does not list the model is disabled with the reason. Apply emits the
new EngineConfig (built through ``with_overrides``, so it is validated like any config);
a ConfigError shows as a message and nothing changes. Above the buttons, the panel says
for every edit not yet applied what applying it will do ("applies now", "reloads the STT
model"), as ``engine.config_diff`` decides it.

The widgets are built in ``app.settings.groups``, the dropdowns filled by
``app.settings.combos``, the servers probed by ``app.settings.remote``; the panel wires
them and turns what they show into an EngineConfig.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QVBoxLayout, QWidget

from app.core.audio_devices import fill_audio_combo
from app.settings.combos import fill_device_combo, fill_models, supported_kinds
from app.settings.fields import editor_value, set_editor_value
from app.settings.groups import (AUTO, MAIN_FIELDS, advanced_group, audio_group, button_row, compute_group,
                                 conversation_group, on_edit)
from app.settings.remote import PROBE_KEYS, REMOTE_STAGES, RemoteProbe
from app.settings.tools_group import TOOLS_KEYS, ToolsGroup
from engine.backends import BackendRegistry
from engine.config import STAGES, EngineConfig
from engine.config_diff import ConfigDiff, diff_configs
from engine.errors import ConfigError

PROBE_DELAY_MS = 600  # after the last keystroke in a base_url: probe then, not per key
#: Settings the desktop panel does not show: several pipeline units run only in realtime
#: mode, whose pipelines are set on the Server tab (``app.server.panel``).
_NOT_SHOWN = {"units"}


class SettingsPanel(QWidget):
    """Edits an EngineConfig; emits ``apply_requested`` with the new one."""

    apply_requested = Signal(object)  # EngineConfig
    audio_device_chosen = Signal(str, str)  # "input"/"output", device setting
    refresh_requested = Signal()
    ptt_key_changed = Signal(str)
    remote_probed = Signal(object)  # {stage: DeviceInfo} of the servers last probed

    def __init__(self, config: EngineConfig, devices=None, audio_devices=None,
                 registry: BackendRegistry | None = None, parent: QWidget | None = None) -> None:
        """``devices`` (DeviceInfo list) and ``audio_devices`` ((inputs, outputs)) may come
        later through ``set_devices``/``set_audio_devices`` (the window discovers them in
        the background)."""
        super().__init__(parent)
        self.registry = registry or BackendRegistry()
        self.config = config
        self.devices = list(devices or [])
        self.inputs, self.outputs = audio_devices or ([], [])
        self._filling = False  # set_config is filling the widgets: no pending-change updates
        self.remote = RemoteProbe(self)
        self.remote.probed.connect(self._remote_probed)
        self._probe_timer = QTimer(self)
        self._probe_timer.setSingleShot(True)
        self._probe_timer.setInterval(PROBE_DELAY_MS)
        self._probe_timer.timeout.connect(self.probe_remote)
        self._build()
        self._connect()
        self.set_config(config)

    # ------------------------------------------------------------------ building
    def _build(self) -> None:
        compute, audio, talk = compute_group(self.registry), audio_group(), conversation_group()
        self.global_device = compute.global_device
        self.backend, self.model, self.device = compute.backend, compute.model, compute.device
        self.input_device, self.output_device, self._rescan = (
            audio.input_device, audio.output_device, audio.rescan)
        self.live, self.barge_in, self.ptt_key = talk.live, talk.barge_in, talk.ptt_key
        self.tools = ToolsGroup(self)
        advanced, fields = advanced_group(MAIN_FIELDS | _NOT_SHOWN | TOOLS_KEYS)
        self.fields: dict[str, QWidget] = {**talk.fields, **self.tools.fields, **fields}
        buttons = button_row()
        self.pending, self.message = buttons.pending, buttons.message
        self.defaults_button, self.revert_button, self.apply_button = (
            buttons.defaults_button, buttons.revert_button, buttons.apply_button)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        columns = QHBoxLayout()
        columns.setSpacing(14)
        left = QVBoxLayout()
        left.setSpacing(12)
        for box in (compute.box, audio.box, talk.box):
            left.addWidget(box)
        left.addStretch(1)
        columns.addLayout(left, 11)
        right = QVBoxLayout()
        right.setSpacing(12)
        right.addWidget(self.tools.box)
        right.addWidget(advanced, 1)
        columns.addLayout(right, 9)
        outer.addLayout(columns, 1)
        outer.addLayout(buttons.layout)

    def _connect(self) -> None:
        for stage in STAGES:
            self.backend[stage].currentIndexChanged.connect(lambda _i, s=stage: self._backend_changed(s))
        self.input_device.activated.connect(lambda _i: self._audio_chosen("input"))
        self.output_device.activated.connect(lambda _i: self._audio_chosen("output"))
        self._rescan.clicked.connect(self.refresh_requested)
        self.ptt_key.currentTextChanged.connect(self.ptt_key_changed)
        self.defaults_button.clicked.connect(lambda: self._fill(EngineConfig()))
        self.revert_button.clicked.connect(lambda: self.set_config(self.config))
        self.apply_button.clicked.connect(self.apply)
        self.tools.edited.connect(self._update_pending)
        for editor in self._editors():
            on_edit(editor, self._update_pending)
        for stage in REMOTE_STAGES:
            for key in PROBE_KEYS:
                editor = self.fields.get(f"{stage}.{key}")
                if editor is not None:
                    on_edit(editor, self._probe_later)
            on_edit(self.backend[stage], self._probe_later)
            on_edit(self.model[stage], self._probe_later)

    def _editors(self) -> list[QWidget]:
        """Every widget whose value is part of ``overrides``."""
        return [self.global_device, self.live, self.barge_in, self.input_device, self.output_device,
                *self.backend.values(), *self.model.values(), *self.device.values(),
                *self.fields.values()]

    # ------------------------------------------------------------------ devices
    def set_devices(self, devices) -> None:
        """Fill every device dropdown from discovery (a list of DeviceInfo); the remote
        servers the settings name are probed again."""
        self.devices = [d for d in devices if d.device.kind != "remote"]
        self._fill_device_combo(self.global_device, None, self.config.device)
        for stage in STAGES:
            self._fill_device_combo(self.device[stage], stage, self.config.stage_config(stage).device)
        self._update_pending()
        self.probe_remote()

    # ------------------------------------------------------------------ remote servers
    def _probe_later(self) -> None:
        if not self._filling:
            self._probe_timer.start()

    def probe_remote(self) -> None:
        """Probe the servers the edited settings name, in the background; the device
        dropdowns show the outcome when it comes (a newer probe supersedes it)."""
        self._probe_timer.stop()
        try:
            config = self.config_from_widgets()
        except ConfigError:
            return  # a value being typed is not valid yet: probe once it is
        self.remote.probe(config)
        self._refill_remote()

    def stop_probing(self, timeout: float = 10.0) -> bool:
        """Cancel a probe not started yet and wait for a running one (closing, tests);
        True if none runs now."""
        self._probe_timer.stop()
        return self.remote.wait(timeout)

    def _remote_probed(self, infos: dict) -> None:
        self._refill_remote()
        self.remote_probed.emit(infos)

    def _refill_remote(self) -> None:
        for stage in REMOTE_STAGES:
            self._fill_device_combo(self.device[stage], stage, self.config.stage_config(stage).device)

    def _fill_device_combo(self, combo: QComboBox, stage: str | None, current: str) -> None:
        kinds, who = (supported_kinds(self.registry, stage, self.backend[stage].currentData())
                      if stage else (None, ""))
        fill_device_combo(combo, [*self.devices, *self.remote.entries(stage)], current,
                          bool(self.devices), kinds, who)

    def _backend_changed(self, stage: str) -> None:
        self._fill_models(stage, self.model[stage].currentText() or AUTO)
        self._fill_device_combo(self.device[stage], stage, self.config.stage_config(stage).device)
        self._update_pending()

    def _fill_models(self, stage: str, current: str) -> None:
        fill_models(self.model[stage], self.registry, stage, self.backend[stage].currentData(), current)

    def set_audio_devices(self, inputs, outputs) -> None:
        """Fill the microphone and speaker dropdowns (lists of AudioDevice)."""
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.set_audio_device("input", self.config.audio.input_device)
        self.set_audio_device("output", self.config.audio.output_device)
        self._update_pending()

    def set_audio_device(self, kind: str, device: str) -> None:
        """Show ``device`` in the ``kind`` dropdown without emitting a change."""
        combo = self.input_device if kind == "input" else self.output_device
        fill_audio_combo(combo, self.inputs if kind == "input" else self.outputs, device, kind)

    def _audio_chosen(self, kind: str) -> None:
        combo = self.input_device if kind == "input" else self.output_device
        self.audio_device_chosen.emit(kind, combo.currentData())

    # ------------------------------------------------------------------ tools
    def set_tool_support(self, support) -> None:
        """What the loaded engine says of its tools (``Engine.tool_support()``, read off
        the GUI thread; None: no engine): the Tools group follows it."""
        self.tools.set_support(support, self.config.tools)

    # ------------------------------------------------------------------ config
    def set_config(self, config: EngineConfig) -> None:
        """Make ``config`` the applied one and show it."""
        self.config = config
        self._fill(config)

    def set_applied(self, config: EngineConfig) -> None:
        """``config`` is now the applied one (a device switch); edits not applied stay."""
        self.config = config
        self._update_pending()

    def _fill(self, config: EngineConfig) -> None:
        self._filling = True
        try:
            self._fill_widgets(config)
        finally:
            self._filling = False
        self._update_pending()
        self.probe_remote()

    def _fill_widgets(self, config: EngineConfig) -> None:
        for stage in STAGES:
            section = config.stage_config(stage)
            combo = self.backend[stage]
            combo.blockSignals(True)
            index = combo.findData(section.backend)
            if index < 0:
                combo.addItem(section.backend, section.backend)
                index = combo.count() - 1
            combo.setCurrentIndex(index)
            combo.blockSignals(False)
            self._fill_models(stage, section.model)
            self.device[stage].clear()  # refilled below with the config's choice
            self._fill_device_combo(self.device[stage], stage, section.device)
        self.global_device.clear()
        self._fill_device_combo(self.global_device, None, config.device)
        self.live.setChecked(config.turns.live_transcription)
        set_editor_value(self.barge_in, config.turns.barge_in)
        for dotted, editor in self.fields.items():
            set_editor_value(editor, config.flat()[dotted])
        self.tools.set_trusted(config.tools.trusted)
        if self.inputs or self.outputs:
            self.set_audio_devices(self.inputs, self.outputs)
        else:
            self.set_audio_device("input", config.audio.input_device)
            self.set_audio_device("output", config.audio.output_device)

    def overrides(self) -> dict[str, object]:
        """Every setting the panel edits, as ``{dotted: value}``."""
        out: dict[str, object] = {"device": self.global_device.currentData() or AUTO,
                                  "turns.live_transcription": self.live.isChecked(),
                                  "turns.barge_in": editor_value(self.barge_in),
                                  "audio.input_device": self.input_device.currentData() or "default",
                                  "audio.output_device": self.output_device.currentData() or "default"}
        for stage in STAGES:
            out[f"{stage}.backend"] = self.backend[stage].currentData() or AUTO
            out[f"{stage}.device"] = self.device[stage].currentData() or AUTO
            if stage != "vad":
                out[f"{stage}.model"] = self.model[stage].currentText().strip() or AUTO
        for dotted, editor in self.fields.items():
            out[dotted] = editor_value(editor)
        out["tools.trusted"] = self.tools.trusted()
        return out

    def config_from_widgets(self) -> EngineConfig:
        """The EngineConfig the widgets show; a ConfigError names a bad value."""
        return self.config.with_overrides(self.overrides())

    def apply(self) -> None:
        """Validate and emit ``apply_requested``; a bad value is a message, nothing else."""
        try:
            config = self.config_from_widgets()
        except ConfigError as exc:
            self.show_message(str(exc), "error")
            return
        self.show_message("Applying…", "info")
        self.apply_requested.emit(config)

    def pending_changes(self) -> ConfigDiff | None:
        """What Apply would change now, or None while a value is not valid."""
        try:
            return diff_configs(self.config, self.config_from_widgets())
        except ConfigError:
            return None

    def _update_pending(self) -> None:
        """Say, per edit not yet applied, what applying it will do."""
        if self._filling:
            return
        try:
            diff = diff_configs(self.config, self.config_from_widgets())
        except ConfigError as exc:
            self.pending.setText(f"Cannot apply: {exc}")
            self.pending.show()
            return
        self.pending.setText(" · ".join(f"{c.key}: {c.description}" for c in diff.changes))
        self.pending.setVisible(not diff.empty)

    def set_busy(self, busy: bool, text: str = "Loading…") -> None:
        """While an Apply runs (``text`` says what it does), Apply waits."""
        self.apply_button.setEnabled(not busy)
        self.apply_button.setText(text if busy else "Apply")

    def show_message(self, text: str, level: str = "info") -> None:
        """A line next to the buttons: ``error``, ``info`` or ``ok``."""
        self.message.setProperty("level", level)
        self.message.setText(text)
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)
