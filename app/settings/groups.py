"""The settings panel's widgets, group by group: built here, wired by ``SettingsPanel``.

Each function builds one group box and returns it with the widgets the panel reads and
writes; none of them connects a signal to the panel's logic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGridLayout, QGroupBox,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton, QScrollArea, QSpinBox,
                               QVBoxLayout, QWidget)

from app.core.widgets import set_item_enabled
from app.settings.fields import field_label, make_editor
from engine.backends import BackendRegistry
from engine.backends.languages import LANGUAGE_NAMES, language_name
from engine.config import AUTO_LANGUAGE, STAGES, WHISPER_LANGUAGES, config_fields

AUTO = "auto"
STAGE_TITLES = {"vad": "Voice detection", "stt": "Speech to text", "llm": "Language model",
                "tts": "Text to speech"}
PTT_KEYS = ("Space", "F8", "F9", "F10", "Insert", "Pause")
#: Shown in the Conversation group, read and written like the Advanced fields.
CONVERSATION_FIELDS = (("stt.language", "Language"),
                       ("tts.voices", "Voice per language"),
                       ("turns.end_of_turn", "End of turn"),
                       ("turns.end_of_turn_threshold", "End-of-turn threshold"),
                       ("audio.echo_cancellation", "Echo cancellation"),
                       ("history.enabled", "History"))
#: A checkbox's own words beside its row's label.
CHECKBOX_TEXTS = {"history.enabled": "Store conversations (File > Private conversation leaves one out)"}
#: Laid out by hand in the groups above Advanced.
MAIN_FIELDS = ({"device", "turns.live_transcription", "turns.barge_in", "audio.input_device",
                "audio.output_device"} | {d for d, _text in CONVERSATION_FIELDS}
               | {f"{s}.{k}" for s in STAGES for k in ("backend", "model", "device")})


def compact(combo: QComboBox, chars: int) -> None:
    """Long entries (GPU names, sound cards) must not dictate the panel's width."""
    combo.setMinimumContentsLength(chars)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)


def on_edit(editor: QWidget, slot: Callable[[], None]) -> None:
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


def _combo(name: str, accessible: str, chars: int | None = None) -> QComboBox:
    combo = QComboBox()
    combo.setObjectName(name)
    combo.setAccessibleName(accessible)
    if chars is not None:
        compact(combo, chars)
    return combo


def _hint(text: str) -> QLabel:
    hint = QLabel(text)
    hint.setObjectName("hint")
    hint.setWordWrap(True)
    return hint


@dataclass
class ComputeGroup:
    """"Models and devices": the default device, and a backend, model and device per stage."""

    box: QGroupBox
    global_device: QComboBox
    backend: dict[str, QComboBox]
    model: dict[str, QComboBox]
    device: dict[str, QComboBox]


def compute_group(registry: BackendRegistry) -> ComputeGroup:
    """The stages' grid; a backend whose package is missing is listed, disabled, with the
    ``pip install`` that adds it."""
    box = QGroupBox("Models and devices")
    grid = QGridLayout(box)
    grid.setHorizontalSpacing(10)
    grid.setVerticalSpacing(8)
    group = ComputeGroup(box, _combo("globalDevice", "Default device", 20), {}, {}, {})
    grid.addWidget(QLabel("Default device"), 0, 0)
    grid.addWidget(group.global_device, 0, 1, 1, 2)
    grid.addWidget(_hint("Every stage runs here unless it names its own device."), 0, 3)
    for col, text in enumerate(("Stage", "Backend", "Model", "Device")):
        head = QLabel(text)
        head.setObjectName("columnHead")
        grid.addWidget(head, 1, col)
    for row, stage in enumerate(STAGES, start=2):
        title = STAGE_TITLES[stage]
        grid.addWidget(QLabel(title), row, 0, Qt.AlignmentFlag.AlignVCenter)
        backend = _combo(f"{stage}Backend", f"{title} backend", 12)
        backend.addItem("auto", AUTO)
        for spec in registry.specs(stage):
            backend.addItem(spec.name, spec.name)
            missing = spec.missing_package()
            i = backend.count() - 1
            if missing:
                set_item_enabled(backend, i, enabled=False)
                backend.setItemData(i, f"not installed: pip install 'parley[{spec.extra}]' "
                                       f"(needs {missing})", Qt.ItemDataRole.ToolTipRole)
            else:
                backend.setItemData(i, spec.description, Qt.ItemDataRole.ToolTipRole)
        model = _combo(f"{stage}Model", f"{title} model", 14)
        model.setEditable(stage != "vad")
        device = _combo(f"{stage}Device", f"{title} device", 18)
        group.backend[stage], group.model[stage], group.device[stage] = backend, model, device
        for col, widget in enumerate((backend, model, device), start=1):
            grid.addWidget(widget, row, col)
    for col, stretch in ((1, 2), (2, 3), (3, 4)):
        grid.setColumnStretch(col, stretch)
    return group


@dataclass
class AudioGroup:
    """"Audio": the microphone and the speaker, and Rescan."""

    box: QGroupBox
    input_device: QComboBox
    output_device: QComboBox
    rescan: QPushButton


def audio_group() -> AudioGroup:
    """The sound-device dropdowns."""
    box = QGroupBox("Audio")
    grid = QGridLayout(box)
    grid.setHorizontalSpacing(10)
    group = AudioGroup(box, _combo("inputDevice", "Microphone", 24), _combo("outputDevice", "Speaker", 24),
                       QPushButton("Rescan"))
    group.rescan.setToolTip("Look for sound cards again (while not listening)")
    group.rescan.setAccessibleName("Rescan sound cards")
    grid.addWidget(QLabel("Microphone"), 0, 0)
    grid.addWidget(group.input_device, 0, 1)
    grid.addWidget(group.rescan, 0, 2)
    grid.addWidget(QLabel("Speaker"), 1, 0)
    grid.addWidget(group.output_device, 1, 1)
    hint = QLabel("A new device is opened first; if it fails, the current one stays.")
    hint.setObjectName("hint")
    grid.addWidget(hint, 2, 1, 1, 2)
    grid.setColumnStretch(1, 1)
    return group


@dataclass
class ConversationGroup:
    """"Conversation": live transcription, interruptions, turn-taking, whether the
    history is kept, the talk key."""

    box: QGroupBox
    live: QCheckBox
    barge_in: QWidget
    fields: dict[str, QWidget]  # read and written like the Advanced fields
    ptt_key: QComboBox


def conversation_group() -> ConversationGroup:
    """How the conversation feels; the push-to-talk key."""
    box = QGroupBox("Conversation")
    form = QFormLayout(box)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
    live = QCheckBox("Show my words while I speak (progressive transcription)")
    live.setObjectName("liveTranscription")
    form.addRow(live)
    fields = {d: (f, t) for d, f, t in config_fields()}
    barge_in = make_editor("turns.barge_in", *fields["turns.barge_in"])
    barge_in.setAccessibleName("Interruptions")
    form.addRow("Interruptions", barge_in)
    # Turn-taking and echo switches are here, not under Advanced: they decide how the
    # conversation feels (how soon Parley answers, whether it can be interrupted aloud).
    editors: dict[str, QWidget] = {}
    for dotted, text in CONVERSATION_FIELDS:
        if dotted in fields:
            editor = editors[dotted] = (language_combo(dotted, *fields[dotted])
                                        if dotted == "stt.language"
                                        else make_editor(dotted, *fields[dotted]))
            if dotted == "tts.voices" and isinstance(editor, QLineEdit):
                editor.setPlaceholderText("auto, or e.g. fr=ff_siwis, de=/voices/de_DE-thorsten-"
                                          "medium.onnx, ja=none")
            editor.setAccessibleName(text)
            if isinstance(editor, QCheckBox) and dotted in CHECKBOX_TEXTS:
                editor.setText(CHECKBOX_TEXTS[dotted])
            form.addRow(text, editor)
    ptt_key = _combo("pttKey", "Push-to-talk key")
    ptt_key.addItems(PTT_KEYS)
    form.addRow("Push-to-talk key", ptt_key)
    return ConversationGroup(box, live, barge_in, editors, ptt_key)


def language_combo(dotted: str, field, tp: type) -> QComboBox:
    """``stt.language``: Auto (detected per turn), then every language Whisper knows, the
    ones Parley names first; an editor like ``make_editor``'s (its tooltip, its name)."""
    template = make_editor(dotted, field, tp)
    combo = _combo(template.objectName(), "Language")
    combo.setToolTip(template.toolTip())
    combo.setAccessibleDescription(template.accessibleDescription())
    combo.setProperty("dotted", dotted)
    combo.addItem("Auto (detected per turn)", AUTO_LANGUAGE)
    named = [code for code in LANGUAGE_NAMES if code in WHISPER_LANGUAGES]
    for code in named + sorted(set(WHISPER_LANGUAGES) - set(named)):
        combo.addItem(language_name(code), code)
    template.deleteLater()
    return combo


def advanced_group(skip: set[str]) -> tuple[QGroupBox, dict[str, QWidget]]:
    """Every EngineConfig field not in ``skip``, by section, in a scroll area; and its
    editors by dotted name."""
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
    editors: dict[str, QWidget] = {}
    section, section_title = None, ""
    for dotted, field, tp in config_fields():
        if dotted in skip:
            continue
        head = dotted.partition(".")[0] if "." in dotted else "engine"
        if head != section:
            section, section_title = head, STAGE_TITLES.get(head, head.capitalize())
            title = QLabel(section_title)
            title.setObjectName("formSection")
            form.addRow(title)
        editor = editors[dotted] = make_editor(dotted, field, tp)
        # Named by its label (make_editor); the section tells apart two "Dtype" fields.
        editor.setAccessibleDescription(f"{section_title}: {editor.accessibleDescription()}")
        label = QLabel(field_label(dotted))
        label.setToolTip(editor.toolTip())
        form.addRow(label, editor)
    scroll.setWidget(body)
    layout.addWidget(scroll)
    return box, editors


@dataclass
class ButtonRow:
    """What Apply will do, the panel's message line, and its buttons."""

    layout: QVBoxLayout
    pending: QLabel
    message: QLabel
    defaults_button: QPushButton
    revert_button: QPushButton
    apply_button: QPushButton


def button_row() -> ButtonRow:
    """The pending-changes line above Restore defaults, Revert and Apply."""
    column = QVBoxLayout()
    column.setContentsMargins(0, 10, 0, 0)
    column.setSpacing(4)
    pending = _hint("")
    pending.setToolTip("What Apply will do with the settings changed here")
    pending.hide()
    column.addWidget(pending)
    row = QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    message = QLabel("")
    message.setObjectName("panelMessage")
    message.setWordWrap(True)
    buttons = ButtonRow(column, pending, message, QPushButton("Restore defaults"), QPushButton("Revert"),
                        QPushButton("Apply"))
    buttons.apply_button.setObjectName("primary")
    buttons.apply_button.setDefault(True)
    row.addWidget(message, 1)
    for b in (buttons.defaults_button, buttons.revert_button, buttons.apply_button):
        row.addWidget(b)
    column.addLayout(row)
    return buttons
