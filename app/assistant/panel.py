"""The Assistant tab: the voice and its speed, who the assistant is (the system prompt,
with presets), and New conversation.

Every change goes through ``EngineController.apply`` as a runtime setting (``tts.voice``,
``tts.speed``, ``llm.system_prompt``), so it applies in place: no model reloads and the
conversation goes on. The voice list and the preview are engine jobs on the controller's
serial lane (``app.assistant.jobs``); the preview plays on its own sink
(``sink_factory``: the configured speaker unless a test gives another) through a
``PreviewPlayer``.

Per-user state lives in QSettings under ``ui/``: ``assistant/presets`` (the user's own
presets, see ``app.assistant.presets``), ``assistant/preset`` (the preset last chosen) and
``assistant/preview_text``; the applied config is saved with ``save_config``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from PySide6.QtCore import QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
                               QLineEdit, QPlainTextEdit, QPushButton, QSlider, QVBoxLayout, QWidget)

from app.assistant.jobs import list_voices, preview_voice
from app.assistant.presets import PRESETS, save_user_presets, user_presets
from app.assistant.voice_preview import PreviewPlayer, speaker_factory
from app.core.saved_settings import save_config, set_ui_value, ui_value
from app.core.window_api import WindowApi
from engine.config import EngineConfig
from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.audio.base import AudioSink
    from engine.config_diff import ConfigDiff

log = logging.getLogger("parley.app.assistant")

PRESET_KEY = "assistant/preset"
PREVIEW_TEXT_KEY = "assistant/preview_text"
PREVIEW_TEXT = "Hello! This is how I sound when I answer you."
APPLY_DELAY_MS = 400  # a voice or speed change applies once the user paused this long

_W = TypeVar("_W", bound=QWidget)


def _named(widget: _W, name: str, tip: str = "") -> _W:
    """An accessible name and a tab stop on every interactive widget."""
    widget.setAccessibleName(name)
    widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    if tip:
        widget.setToolTip(tip)
    return widget


class AssistantPanel(QWidget):
    """Voice, speed, system prompt (with presets) and New conversation; see the module doc."""

    preview_audio = Signal(object, int)  # the preview's audio (float32 mono) and its rate
    conversation_cleared = Signal()  # New conversation was asked for
    _play_failed = Signal(str)  # from the preview thread

    def __init__(self, controller, settings, sink_factory: Callable[[], AudioSink] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("assistantPanel")
        self.controller = controller
        self.settings = settings
        self.player = PreviewPlayer(sink_factory or speaker_factory(controller),
                                    self._play_failed.emit)
        self._play_failed.connect(lambda text: self.show_message(text, "error"))
        self._saving = False  # an Apply of ours is in flight: save the config once applied
        self._shown_prompt = ""  # the applied prompt last put in the editor
        self._apply_timer = QTimer(self, singleShot=True, interval=APPLY_DELAY_MS)
        self._apply_timer.timeout.connect(self.apply_voice_and_speed)
        layout = QVBoxLayout(self)
        layout.addWidget(self._voice_group())
        layout.addWidget(self._prompt_group(), 1)
        layout.addWidget(self._conversation_group())
        self._connect()
        self._show_config(controller.config)
        if controller.engine is not None:
            self.refresh_voices()
        else:
            self.voice_note.setText("The voices are listed once the models are loaded.")

    @property
    def sink_factory(self) -> Callable[[], AudioSink]:
        """What the preview plays on (a new sink per preview)."""
        return self.player.sink_factory

    @sink_factory.setter
    def sink_factory(self, factory: Callable[[], AudioSink]) -> None:
        self.player.sink_factory = factory

    # ------------------------------------------------------------------ layout
    def _voice_group(self) -> QGroupBox:
        box = QGroupBox("Voice and speech")
        box.setObjectName("voiceGroup")
        form = QFormLayout(box)
        self.voice_combo = _named(QComboBox(), "Voice",
                                  "The voices the loaded speech model has; applies at once")
        self.voice_combo.setObjectName("voiceCombo")
        self.voice_note = QLabel("Loading the voices…")
        self.voice_note.setObjectName("hint")
        self.voice_note.setWordWrap(True)
        self.preview_text = _named(QLineEdit(ui_value(self.settings, PREVIEW_TEXT_KEY, PREVIEW_TEXT)),
                                   "Preview text", "What the preview says")
        self.preview_button = _named(QPushButton("Preview"), "Preview voice",
                                     "Hear the chosen voice and speed on the speaker")
        self.speed_slider = _named(QSlider(Qt.Orientation.Horizontal), "Speaking speed slider",
                                   "How fast the assistant speaks; applies at once")
        self.speed_slider.setRange(25, 400)  # hundredths of tts.speed's 0.25..4.0
        self.speed_spin = _named(QDoubleSpinBox(), "Speaking speed",
                                 "How fast the assistant speaks (1.0 is the voice's own pace)")
        self.speed_spin.setRange(0.25, 4.0)
        self.speed_spin.setSingleStep(0.05)
        self.speed_spin.setSuffix("×")
        voice_row = QHBoxLayout()
        voice_row.addWidget(self.voice_combo, 1)
        preview_row = QHBoxLayout()
        preview_row.addWidget(self.preview_text, 1)
        preview_row.addWidget(self.preview_button)
        speed_row = QHBoxLayout()
        speed_row.addWidget(self.speed_slider, 1)
        speed_row.addWidget(self.speed_spin)
        for text, row, buddy in (("&Voice", voice_row, self.voice_combo),
                                 ("Previe&w", preview_row, self.preview_text),
                                 ("&Speed", speed_row, self.speed_spin)):
            label = QLabel(text)
            label.setBuddy(buddy)
            form.addRow(label, row)
        form.addRow("", self.voice_note)
        return box

    def _prompt_group(self) -> QGroupBox:
        box = QGroupBox("Who it is")
        box.setObjectName("promptGroup")
        column = QVBoxLayout(box)
        self.preset_combo = _named(QComboBox(), "Preset",
                                   "Choose a ready-made personality; it applies at once")
        self.preset_combo.setObjectName("presetCombo")
        self.prompt_edit = _named(QPlainTextEdit(), "System prompt",
                                  "The instructions the language model follows every turn")
        self.prompt_edit.setObjectName("promptEdit")
        self.prompt_edit.setTabChangesFocus(True)  # Tab moves on, as everywhere else
        self.use_button = _named(QPushButton("Use this prompt"), "Use this prompt",
                                 "Apply the prompt now; the conversation goes on")
        self.preset_name = _named(QLineEdit(), "Preset name", "A name for your own preset")
        self.preset_name.setPlaceholderText("Name for a preset of your own")
        self.save_preset_button = _named(QPushButton("Save as preset"), "Save as preset",
                                         "Keep this prompt as one of your presets")
        self.delete_preset_button = _named(QPushButton("Delete preset"), "Delete preset",
                                           "Remove the chosen preset of your own")
        top = QHBoxLayout()
        label = QLabel("&Preset")
        label.setBuddy(self.preset_combo)
        top.addWidget(label)
        top.addWidget(self.preset_combo, 1)
        top.addWidget(self.delete_preset_button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.preset_name, 1)
        bottom.addWidget(self.save_preset_button)
        bottom.addStretch(1)
        bottom.addWidget(self.use_button)
        column.addLayout(top)
        column.addWidget(self.prompt_edit, 1)
        column.addLayout(bottom)
        self._fill_presets(ui_value(self.settings, PRESET_KEY, ""))
        return box

    def _conversation_group(self) -> QGroupBox:
        box = QGroupBox("Conversation")
        box.setObjectName("assistantConversationGroup")
        row = QHBoxLayout(box)
        self.new_button = _named(QPushButton("New conversation"), "New conversation",
                                 "Forget the chat so far, on screen and in the model (Ctrl+N)")
        self.message = QLabel("")
        self.message.setObjectName("panelMessage")
        self.message.setWordWrap(True)
        row.addWidget(self.new_button)
        row.addWidget(self.message, 1)
        return box

    def _connect(self) -> None:
        c = self.controller
        self.voice_combo.currentIndexChanged.connect(lambda *_: self._apply_timer.start())
        self.speed_slider.valueChanged.connect(self._slider_moved)
        self.speed_spin.valueChanged.connect(self._spin_changed)
        self.preview_button.clicked.connect(self.preview)
        self.preset_combo.activated.connect(lambda *_: self.use_preset())
        self.use_button.clicked.connect(self.use_prompt)
        self.save_preset_button.clicked.connect(self.save_preset)
        self.delete_preset_button.clicked.connect(self.delete_preset)
        self.new_button.clicked.connect(self.new_conversation)
        c.config_changed.connect(self._show_config)
        c.engine_changed.connect(lambda *_: self.refresh_voices())
        c.applied.connect(self._applied)
        c.apply_failed.connect(self._apply_failed)

    # ------------------------------------------------------------------ voices
    def refresh_voices(self) -> None:
        """Ask the engine (in the background) for the voices of its TTS model."""
        self.voice_note.setText("Loading the voices…")
        list_voices(self.controller, self._show_voices, lambda text: self.voice_note.setText(text))

    def _show_voices(self, voices) -> None:
        current = self.controller.config.tts.voice
        with QSignalBlocker(self.voice_combo):
            self.voice_combo.clear()
            self.voice_combo.setEditable(voices.any_name)
            for voice in voices.voices:
                self.voice_combo.addItem(voice.label, voice.name)
            self._select_voice(current)
        self.voice_note.setText(voices.note[:1].upper() + voices.note[1:] + "."
                                if voices.note else "")

    def _select_voice(self, name: str) -> None:
        index = self.voice_combo.findData(name)
        if index < 0 and self.voice_combo.isEditable():
            self.voice_combo.addItem(name, name)  # a name the server takes, typed before
            index = self.voice_combo.count() - 1
        if index >= 0:
            self.voice_combo.setCurrentIndex(index)

    def voice(self) -> str:
        """The ``tts.voice`` value chosen (or typed, for a backend that takes any name)."""
        text = self.voice_combo.currentText().strip()
        index = self.voice_combo.findText(text)
        if index >= 0 and self.voice_combo.itemData(index) is not None:
            return str(self.voice_combo.itemData(index))
        return text or "auto"

    def _slider_moved(self, value: int) -> None:
        with QSignalBlocker(self.speed_spin):
            self.speed_spin.setValue(value / 100)
        self._apply_timer.start()

    def _spin_changed(self, value: float) -> None:
        with QSignalBlocker(self.speed_slider):
            self.speed_slider.setValue(round(value * 100))
        self._apply_timer.start()

    def apply_voice_and_speed(self) -> None:
        """Apply the chosen voice and speed now (runtime settings: in place)."""
        self._apply_timer.stop()
        self._apply({"tts.voice": self.voice(), "tts.speed": round(self.speed_spin.value(), 2)})

    def preview(self) -> None:
        """Synthesise the preview text with the chosen voice and speed in the background,
        then play it (``preview_audio`` carries the audio)."""
        text = self.preview_text.text().strip() or PREVIEW_TEXT
        set_ui_value(self.settings, PREVIEW_TEXT_KEY, text)
        self.preview_button.setEnabled(False)
        self.show_message("Preparing the preview…", "info")
        preview_voice(self.controller, text, self.voice(), round(self.speed_spin.value(), 2),
                      self._preview_ready, self._preview_failed)

    def _preview_ready(self, result) -> None:
        audio, rate = result
        self.preview_button.setEnabled(True)
        self.show_message(f"Preview: {audio.size / rate:.1f} s of speech.", "ok")
        self.preview_audio.emit(audio, rate)
        self.player.play(audio, rate)

    def _preview_failed(self, message: str) -> None:
        self.preview_button.setEnabled(True)
        self.show_message(f"No preview: {message}", "error")

    # ------------------------------------------------------------------ prompt and presets
    def presets(self) -> dict[str, str]:
        """Built-in presets, then the user's own (name -> prompt)."""
        return {**PRESETS, **self._user_presets()}

    def _user_presets(self) -> dict[str, str]:
        return user_presets(self.settings)

    def _fill_presets(self, select: str) -> None:
        with QSignalBlocker(self.preset_combo):
            self.preset_combo.clear()
            for name in self.presets():
                self.preset_combo.addItem(name)
            index = self.preset_combo.findText(select)
            self.preset_combo.setCurrentIndex(max(index, 0))
        self.delete_preset_button.setEnabled(self.preset_combo.currentText() not in PRESETS)

    def use_preset(self, name: str | None = None) -> None:
        """Put preset ``name`` (default: the one chosen) in the editor and apply it."""
        if name is not None:
            self.preset_combo.setCurrentIndex(self.preset_combo.findText(name))
        name = self.preset_combo.currentText()
        prompt = self.presets().get(name)
        if prompt is None:
            return
        set_ui_value(self.settings, PRESET_KEY, name)
        self.delete_preset_button.setEnabled(name not in PRESETS)
        self.prompt_edit.setPlainText(prompt)
        self.use_prompt()

    def use_prompt(self) -> None:
        """Apply the editor's prompt now (a runtime setting: in place)."""
        self._apply({"llm.system_prompt": self.prompt_edit.toPlainText().strip()})

    def save_preset(self) -> None:
        """Keep the editor's prompt as the user's preset named in the name field."""
        name = self.preset_name.text().strip()
        if not name or name in PRESETS:
            self.show_message("Give your preset a name of its own (not one of the "
                              f"built-in ones: {', '.join(PRESETS)}).", "error")
            return
        user = self._user_presets()
        user[name] = self.prompt_edit.toPlainText().strip()
        save_user_presets(self.settings, user)
        set_ui_value(self.settings, PRESET_KEY, name)
        self.preset_name.clear()
        self._fill_presets(name)
        self.show_message(f"Saved the preset {name!r}.", "ok")

    def delete_preset(self) -> None:
        """Remove the chosen preset if it is one of the user's own."""
        name = self.preset_combo.currentText()
        user = self._user_presets()
        if name not in user:
            return
        del user[name]
        save_user_presets(self.settings, user)
        self._fill_presets("")
        self.show_message(f"Deleted the preset {name!r}.", "ok")

    # ------------------------------------------------------------------ conversation
    def new_conversation(self) -> None:
        """Forget the conversation: on screen (``conversation_cleared``) and in the
        engine (history and KV cache, in the background)."""
        self.player.stop()
        self.conversation_cleared.emit()
        self.controller.new_conversation()
        self.show_message("New conversation.", "ok")

    # ------------------------------------------------------------------ apply
    def _apply(self, overrides: dict) -> None:
        c = self.controller
        if c.engine is None:  # Apply would build an engine of its own, racing the load
            self.show_message("The models are not loaded yet; change this once they are.",
                              "error")
            self._show_config(c.config)
            return
        try:
            config = c.config.with_overrides(overrides)
        except ConfigError as exc:
            self.show_message(str(exc), "error")
            return
        if config == c.config:
            return
        self._saving = True
        self.show_message("Applying…", "info")
        c.apply(config)

    def _applied(self, diff: ConfigDiff) -> None:
        if self._saving:
            self._saving = False
            save_config(self.settings, self.controller.config)
            self.show_message("Applied; the conversation goes on.", "ok")
        if "tts" in diff.reload_stages:
            self.refresh_voices()  # a new voice model: its own voices

    def _apply_failed(self, failure) -> None:
        if self._saving:
            self._saving = False
            self.show_message(str(failure), "error")
            self._show_config(self.controller.config)

    def _show_config(self, config: EngineConfig) -> None:
        """Show the applied voice, speed and prompt (an unapplied prompt edit stays)."""
        with QSignalBlocker(self.voice_combo):
            self._select_voice(config.tts.voice)
        with QSignalBlocker(self.speed_spin), QSignalBlocker(self.speed_slider):
            self.speed_spin.setValue(config.tts.speed)
            self.speed_slider.setValue(round(config.tts.speed * 100))
        prompt = config.llm.system_prompt
        if self.prompt_edit.toPlainText().strip() in ("", self._shown_prompt):
            self.prompt_edit.setPlainText(prompt)
        self._shown_prompt = prompt

    def show_message(self, text: str, level: str = "info") -> None:
        """A line beside New conversation: ``error``, ``info`` or ``ok``."""
        self.message.setProperty("level", level)
        self.message.setText(text)
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """Leaving the tab (or closing the window) cuts off a preview (its thread ends
        within a poll; waited for briefly)."""
        self.player.stop(0.5)
        super().hideEvent(event)


def install(window: WindowApi) -> AssistantPanel:
    """Add the Assistant tab and File > New conversation (Ctrl+N) to ``window``; once (a
    second call returns the first panel). What New conversation clears on screen is the
    window's to connect: ``conversation_cleared``."""
    panel = window.widget.findChild(AssistantPanel)
    if panel is not None:
        return panel
    panel = AssistantPanel(window.controller, window.settings)
    window.add_tab("Assistant", panel)
    action = QAction("New conversation", window.widget, shortcut=QKeySequence("Ctrl+N"))
    action.setObjectName("newConversationAction")
    action.setToolTip(panel.new_button.toolTip())
    action.triggered.connect(panel.new_conversation)
    window.add_file_action(action)  # with the conversation's actions, above Quit
    return panel
