"""The settings panel: per-stage backend, model and device; the global device; microphone
and speaker; progressive transcription; every other EngineConfig field under Advanced, but
``units``: several pipeline units run only in realtime mode, set on the Server tab.

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
"""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGridLayout, QGroupBox,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton, QScrollArea, QSpinBox,
                               QVBoxLayout, QWidget)

from app.settings.fields import editor_value, field_label, make_editor, set_editor_value
from engine.backends import BackendRegistry
from engine.config import STAGES, EngineConfig, config_fields
from engine.config_diff import ConfigDiff, diff_configs
from engine.runtime.devices import Device, DeviceInfo
from engine.errors import ConfigError

AUTO = "auto"
STAGE_TITLES = {"vad": "Voice detection", "stt": "Speech to text", "llm": "Language model",
                "tts": "Text to speech"}
PTT_KEYS = ("Space", "F8", "F9", "F10", "Insert", "Pause")
#: Shown in the Conversation group, read and written like the Advanced fields.
_CONVERSATION_FIELDS = (("turns.end_of_turn", "End of turn"),
                        ("turns.end_of_turn_threshold", "End-of-turn threshold"),
                        ("audio.echo_cancellation", "Echo cancellation"))
_MAIN_FIELDS = ({"device", "turns.live_transcription", "turns.barge_in", "audio.input_device",
                 "audio.output_device"} | {d for d, _text in _CONVERSATION_FIELDS}
                | {f"{s}.{k}" for s in STAGES for k in ("backend", "model", "device")})
#: Stages that can run on a remote server, and the settings whose edits probe it again.
REMOTE_STAGES = ("stt", "llm", "tts")
_PROBE_KEYS = ("base_url", "api_key_env", "timeout_s")
PROBE_DELAY_MS = 600  # after the last keystroke in a base_url: probe then, not per key
_REMOTE = Device("remote")
#: Settings the desktop panel does not show: several pipeline units run only in realtime
#: mode, whose pipelines are set on the Server tab (``app.server.panel``).
_NOT_SHOWN = {"units"}


def _compact(combo: QComboBox, chars: int) -> None:
    """Long entries (GPU names, sound cards) must not dictate the panel's width."""
    combo.setMinimumContentsLength(chars)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)


class SettingsPanel(QWidget):
    """Edits an EngineConfig; emits ``apply_requested`` with the new one."""

    apply_requested = Signal(object)  # EngineConfig
    audio_device_chosen = Signal(str, str)  # "input"/"output", device setting
    refresh_requested = Signal()
    ptt_key_changed = Signal(str)
    remote_probed = Signal(object)  # {stage: DeviceInfo} of the servers last probed
    _remote_found = Signal(object, int)  # from the probe thread: infos, probe number

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
        self.backend: dict[str, QComboBox] = {}
        self.model: dict[str, QComboBox] = {}
        self.device: dict[str, QComboBox] = {}
        self.fields: dict[str, QWidget] = {}
        self._filling = False  # set_config is filling the widgets: no pending-change updates
        self.remote: dict[str, DeviceInfo] = {}  # stage -> its probed server
        self._remote_urls: dict[str, str] = {}  # stage -> base_url being probed or probed
        self._probe_number = 0
        self._probe_thread: threading.Thread | None = None
        self._probe_timer = QTimer(self)
        self._probe_timer.setSingleShot(True)
        self._probe_timer.setInterval(PROBE_DELAY_MS)
        self._probe_timer.timeout.connect(self.probe_remote)
        self._remote_found.connect(self._remote_probed, Qt.ConnectionType.QueuedConnection)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        columns = QHBoxLayout()
        columns.setSpacing(14)
        left = QVBoxLayout()
        left.setSpacing(12)
        left.addWidget(self._compute_group())
        left.addWidget(self._audio_group())
        left.addWidget(self._conversation_group())
        left.addStretch(1)
        columns.addLayout(left, 11)
        columns.addWidget(self._advanced_group(), 9)
        outer.addLayout(columns, 1)
        outer.addLayout(self._buttons())
        for editor in self._editors():
            _on_edit(editor, self._update_pending)
        for stage in REMOTE_STAGES:
            for key in _PROBE_KEYS:
                editor = self.fields.get(f"{stage}.{key}")
                if editor is not None:
                    _on_edit(editor, self._probe_later)
            _on_edit(self.backend[stage], self._probe_later)
            _on_edit(self.model[stage], self._probe_later)
        self.set_config(config)

    # ------------------------------------------------------------------ building
    def _compute_group(self) -> QGroupBox:
        box = QGroupBox("Models and devices")
        grid = QGridLayout(box)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(8)
        self.global_device = QComboBox()
        self.global_device.setObjectName("globalDevice")
        self.global_device.setAccessibleName("Default device")
        _compact(self.global_device, 20)
        grid.addWidget(QLabel("Default device"), 0, 0)
        grid.addWidget(self.global_device, 0, 1, 1, 2)
        hint = QLabel("Every stage runs here unless it names its own device.")
        hint.setObjectName("hint")
        hint.setWordWrap(True)
        grid.addWidget(hint, 0, 3)
        for col, text in enumerate(("Stage", "Backend", "Model", "Device")):
            head = QLabel(text)
            head.setObjectName("columnHead")
            grid.addWidget(head, 1, col)
        for row, stage in enumerate(STAGES, start=2):
            grid.addWidget(QLabel(STAGE_TITLES[stage]), row, 0, Qt.AlignmentFlag.AlignVCenter)
            backend = QComboBox()
            backend.setObjectName(f"{stage}Backend")
            backend.setAccessibleName(f"{STAGE_TITLES[stage]} backend")
            _compact(backend, 12)
            backend.addItem("auto", AUTO)
            for spec in self.registry.specs(stage):
                backend.addItem(spec.name, spec.name)
                missing = spec.missing_package()
                i = backend.count() - 1
                if missing:
                    backend.model().item(i).setEnabled(False)
                    backend.setItemData(i, f"not installed: pip install 'parley[{spec.extra}]' "
                                           f"(needs {missing})", Qt.ItemDataRole.ToolTipRole)
                else:
                    backend.setItemData(i, spec.description, Qt.ItemDataRole.ToolTipRole)
            backend.currentIndexChanged.connect(lambda _i, s=stage: self._backend_changed(s))
            model = QComboBox()
            model.setObjectName(f"{stage}Model")
            model.setAccessibleName(f"{STAGE_TITLES[stage]} model")
            model.setEditable(stage != "vad")
            _compact(model, 14)
            device = QComboBox()
            device.setObjectName(f"{stage}Device")
            device.setAccessibleName(f"{STAGE_TITLES[stage]} device")
            _compact(device, 18)
            self.backend[stage], self.model[stage], self.device[stage] = backend, model, device
            grid.addWidget(backend, row, 1)
            grid.addWidget(model, row, 2)
            grid.addWidget(device, row, 3)
        grid.setColumnStretch(1, 2)
        grid.setColumnStretch(2, 3)
        grid.setColumnStretch(3, 4)
        return box

    def _audio_group(self) -> QGroupBox:
        box = QGroupBox("Audio")
        grid = QGridLayout(box)
        grid.setHorizontalSpacing(10)
        self.input_device = QComboBox()
        self.input_device.setObjectName("inputDevice")
        self.output_device = QComboBox()
        self.output_device.setObjectName("outputDevice")
        self.input_device.setAccessibleName("Microphone")
        self.output_device.setAccessibleName("Speaker")
        _compact(self.input_device, 24)
        _compact(self.output_device, 24)
        self.input_device.activated.connect(lambda _i: self._audio_chosen("input"))
        self.output_device.activated.connect(lambda _i: self._audio_chosen("output"))
        refresh = QPushButton("Rescan")
        refresh.setToolTip("Look for sound cards again (while not listening)")
        refresh.setAccessibleName("Rescan sound cards")
        refresh.clicked.connect(self.refresh_requested)
        grid.addWidget(QLabel("Microphone"), 0, 0)
        grid.addWidget(self.input_device, 0, 1)
        grid.addWidget(refresh, 0, 2)
        grid.addWidget(QLabel("Speaker"), 1, 0)
        grid.addWidget(self.output_device, 1, 1)
        hint = QLabel("A new device is opened first; if it fails, the current one stays.")
        hint.setObjectName("hint")
        grid.addWidget(hint, 2, 1, 1, 2)
        grid.setColumnStretch(1, 1)
        return box

    def _conversation_group(self) -> QGroupBox:
        box = QGroupBox("Conversation")
        form = QFormLayout(box)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        self.live = QCheckBox("Show my words while I speak (progressive transcription)")
        self.live.setObjectName("liveTranscription")
        form.addRow(self.live)
        fields = {d: (f, t) for d, f, t in config_fields()}
        self.barge_in = make_editor("turns.barge_in", *fields["turns.barge_in"])
        self.barge_in.setAccessibleName("Interruptions")
        form.addRow("Interruptions", self.barge_in)
        # Turn-taking and echo switches are here, not under Advanced: they decide how the
        # conversation feels (how soon Parley answers, whether it can be interrupted aloud).
        for dotted, text in _CONVERSATION_FIELDS:
            if dotted in fields:
                editor = self.fields[dotted] = make_editor(dotted, *fields[dotted])
                editor.setAccessibleName(text)
                form.addRow(text, editor)
        self.ptt_key = QComboBox()
        self.ptt_key.setObjectName("pttKey")
        self.ptt_key.setAccessibleName("Push-to-talk key")
        self.ptt_key.addItems(PTT_KEYS)
        self.ptt_key.currentTextChanged.connect(self.ptt_key_changed)
        form.addRow("Push-to-talk key", self.ptt_key)
        return box

    def _advanced_group(self) -> QGroupBox:
        box = QGroupBox("Advanced")
        layout = QVBoxLayout(box)
        layout.setContentsMargins(4, 8, 4, 4)
        scroll = QScrollArea()
        scroll.setObjectName("advancedScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        body.setObjectName("advancedBody")
        form = QFormLayout(body)
        form.setContentsMargins(8, 0, 12, 0)
        form.setVerticalSpacing(6)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        section = None
        for dotted, field, tp in config_fields():
            if dotted in _MAIN_FIELDS or dotted in _NOT_SHOWN:
                continue
            head = dotted.partition(".")[0] if "." in dotted else "engine"
            if head != section:
                section = head
                title = QLabel(STAGE_TITLES.get(head, head.capitalize()))
                title.setObjectName("formSection")
                form.addRow(title)
            editor = make_editor(dotted, field, tp)
            # Named by its label (make_editor); the section tells apart two "Dtype" fields.
            editor.setAccessibleDescription(f"{title.text()}: {editor.accessibleDescription()}")
            self.fields[dotted] = editor
            label = QLabel(field_label(dotted))
            label.setToolTip(editor.toolTip())
            form.addRow(label, editor)
        scroll.setWidget(body)
        layout.addWidget(scroll)
        return box

    def _buttons(self) -> QVBoxLayout:
        column = QVBoxLayout()
        column.setContentsMargins(0, 10, 0, 0)
        column.setSpacing(4)
        self.pending = QLabel("")
        self.pending.setObjectName("hint")
        self.pending.setWordWrap(True)
        self.pending.setToolTip("What Apply will do with the settings changed here")
        self.pending.hide()
        column.addWidget(self.pending)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        self.message = QLabel("")
        self.message.setObjectName("panelMessage")
        self.message.setWordWrap(True)
        self.defaults_button = QPushButton("Restore defaults")
        self.revert_button = QPushButton("Revert")
        self.apply_button = QPushButton("Apply")
        self.apply_button.setObjectName("primary")
        self.apply_button.setDefault(True)
        self.defaults_button.clicked.connect(lambda: self._fill(EngineConfig()))
        self.revert_button.clicked.connect(lambda: self.set_config(self.config))
        self.apply_button.clicked.connect(self.apply)
        row.addWidget(self.message, 1)
        for b in (self.defaults_button, self.revert_button, self.apply_button):
            row.addWidget(b)
        column.addLayout(row)
        return column

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
            self._fill_device_combo(self.device[stage], stage, getattr(self.config, stage).device)
        self._update_pending()
        self.probe_remote()

    # ------------------------------------------------------------------ remote servers
    def _probe_later(self) -> None:
        if not self._filling:
            self._probe_timer.start()

    def probe_remote(self) -> None:
        """Probe the servers the edited settings name, on a short-lived thread; the device
        dropdowns show the outcome when it comes (a newer probe supersedes it)."""
        self._probe_timer.stop()
        try:
            config = self.config_from_widgets()
        except ConfigError:
            return  # a value being typed is not valid yet: probe once it is
        urls = {s: getattr(config, s).base_url.strip() for s in REMOTE_STAGES
                if getattr(config, s).base_url.strip()}
        self._probe_number += 1
        number = self._probe_number
        self._remote_urls = urls
        self.remote = {s: info for s, info in self.remote.items() if s in urls}
        self._refill_remote()
        if not urls:
            return

        def run() -> None:
            from engine.runtime.devices import discover_remote

            try:
                infos = {i.stages[0]: i for i in discover_remote(config)}
            except Exception as exc:  # noqa: BLE001 - shown in the dropdown, never raised
                infos = {s: DeviceInfo(_REMOTE, urls[s], False, f"probe failed: {exc}", stages=(s,))
                         for s in urls}
            try:
                self._remote_found.emit(infos, number)
            except RuntimeError:  # the panel was closed while probing
                pass

        self._probe_thread = threading.Thread(target=run, name="parley-remote-probe", daemon=True)
        self._probe_thread.start()

    def stop_probing(self, timeout: float = 10.0) -> bool:
        """Cancel a probe not started yet and wait for a running one (closing, tests);
        True if none runs now."""
        self._probe_timer.stop()
        thread = self._probe_thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def _remote_probed(self, infos: dict, number: int) -> None:
        if number != self._probe_number:
            return  # a newer probe is on its way
        self.remote = dict(infos)
        self._refill_remote()
        self.remote_probed.emit(dict(self.remote))

    def _refill_remote(self) -> None:
        for stage in REMOTE_STAGES:
            self._fill_device_combo(self.device[stage], stage, getattr(self.config, stage).device)

    def _supported_kinds(self, stage: str) -> tuple[set[str], str]:
        """Device kinds the stage's chosen backend runs on, and a phrase naming it."""
        name = self.backend[stage].currentData()
        if name and name != AUTO:
            spec = self.registry.get(stage, name)
            return set(spec.devices), spec.name
        specs = [s for s in self.registry.specs(stage) if s.missing_package() is None]
        return {k for s in specs for k in s.devices}, f"no installed {stage} backend"

    def _fill_device_combo(self, combo: QComboBox, stage: str | None, current: str) -> None:
        wanted = combo.currentData() if combo.count() else current
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("auto — best available", AUTO)
        kinds, who = self._supported_kinds(stage) if stage else (None, "")
        for info in [*self.devices, *self._remote_entries(stage)]:
            combo.addItem(info.label, str(info.device))
            i = combo.count() - 1
            why = None
            if not info.available:
                why = f"{info.device} is not available: {info.reason or 'not present'}"
            elif kinds is not None and info.device.kind not in kinds:
                runs_on = ", ".join(sorted(kinds)) or "nothing here"
                why = f"{who} does not run on {info.device.kind}; it runs on {runs_on}"
            combo.model().item(i).setEnabled(why is None)
            combo.setItemData(i, why or info.label, Qt.ItemDataRole.ToolTipRole)
        index = combo.findData(wanted)
        if index < 0:  # a setting naming a device discovery did not report: keep it visible
            combo.addItem(f"{wanted} (not found)" if self.devices else wanted, wanted)
            index = combo.count() - 1
            combo.model().item(index).setEnabled(not self.devices)  # else: still discovering
        combo.setCurrentIndex(index)
        combo.blockSignals(False)

    def _remote_entries(self, stage: str | None) -> list[DeviceInfo]:
        """The stage's server, as probed (or being probed), if its base_url is set."""
        if stage not in REMOTE_STAGES or stage not in self._remote_urls:
            return []
        info = self.remote.get(stage)
        if info is None:
            url = self._remote_urls[stage]
            return [DeviceInfo(_REMOTE, f"{url} (checking…)", False,
                               f"checking {url}: is it reachable, does it list the model?",
                               stages=(stage,))]
        return [info]

    def _backend_changed(self, stage: str) -> None:
        self._fill_models(stage, self.model[stage].currentText() or AUTO)
        self._fill_device_combo(self.device[stage], stage, getattr(self.config, stage).device)
        self._update_pending()

    def _fill_models(self, stage: str, current: str) -> None:
        combo = self.model[stage]
        combo.blockSignals(True)
        combo.clear()
        if stage == "vad":
            combo.addItem("built into the backend", AUTO)
            combo.setEnabled(False)
            combo.blockSignals(False)
            return
        combo.addItem(AUTO, AUTO)
        name = self.backend[stage].currentData()
        specs = self.registry.specs(stage) if name in (None, AUTO) else [self.registry.get(stage, name)]
        for model_id in dict.fromkeys(m for s in specs for m in s.hub_models.values()):
            combo.addItem(model_id, model_id)
        if combo.findText(current) < 0:
            combo.addItem(current, current)
        combo.setCurrentIndex(combo.findText(current))
        combo.setToolTip("auto picks the hub default if it is cached or reachable, else the "
                         "bundled offline model; or type a model id or a local folder")
        combo.blockSignals(False)

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
            section = getattr(config, stage)
            combo = self.backend[stage]
            combo.blockSignals(True)
            index = combo.findData(section.backend)
            if index < 0:
                combo.addItem(section.backend, section.backend)
                index = combo.count() - 1
            combo.setCurrentIndex(index)
            combo.blockSignals(False)
            self._fill_models(stage, getattr(section, "model", AUTO))
            self.device[stage].clear()  # refilled below with the config's choice
            self._fill_device_combo(self.device[stage], stage, section.device)
        self.global_device.clear()
        self._fill_device_combo(self.global_device, None, config.device)
        self.live.setChecked(config.turns.live_transcription)
        set_editor_value(self.barge_in, config.turns.barge_in)
        for dotted, editor in self.fields.items():
            set_editor_value(editor, config.flat()[dotted])
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


def _on_edit(editor: QWidget, slot) -> None:
    """Call ``slot()`` whenever the user (or code) changes ``editor``'s value."""
    if isinstance(editor, QComboBox):
        editor.currentIndexChanged.connect(lambda *_: slot())
        if editor.isEditable():
            editor.editTextChanged.connect(lambda *_: slot())
    elif isinstance(editor, QCheckBox):
        editor.toggled.connect(lambda *_: slot())
    elif isinstance(editor, (QSpinBox, QDoubleSpinBox)):
        editor.valueChanged.connect(lambda *_: slot())
    elif isinstance(editor, QLineEdit):
        editor.textChanged.connect(lambda *_: slot())


def fill_audio_combo(combo: QComboBox, devices, chosen: str, kind: str) -> None:
    """Fill a microphone or speaker dropdown without emitting a change: "System default
    (name)", then each device's label (the device's name as the item's data); a chosen
    device that is not present stays visible as "(not found)"."""
    combo.blockSignals(True)
    combo.clear()
    default = next((d.name for d in devices if d.is_default), None)
    combo.addItem(f"System default ({default})" if default else "System default", "default")
    for d in devices:
        combo.addItem(d.label, d.name)
    if not devices:
        combo.setItemData(0, f"no {kind} device is present", Qt.ItemDataRole.ToolTipRole)
    index = combo.findData(chosen)
    if index < 0:
        combo.addItem(f"{chosen} (not found)", chosen)
        index = combo.count() - 1
    combo.setCurrentIndex(index)
    combo.blockSignals(False)
