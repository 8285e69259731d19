"""The first-run check: pick the microphone and speaker, hear yourself transcribed, hear a
sample reply, and keep the devices that work.

``SetupCheckDialog`` runs ``engine.doctor.device_check``'s ``MicCheck`` and ``SpeakerCheck`` on
the loaded engine's models, each on a lane the dialog owns (``app.core.background``,
joined when it closes); results come back on the GUI thread, and the level meter is redrawn by a timer,
never per audio block. "Use these devices" switches the devices through the controller's
transactional ``switch_audio`` and, once that worked, saves them and ``ui/first_run_done``.

``install(window)`` adds "Check microphone and speaker…" to the Help menu and, on a first
start, opens the dialog (see ``install`` for when it does not).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (QComboBox, QDialog, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton,
                               QVBoxLayout, QWidget)

from app.core.audio_devices import chosen_device, fill_audio_combo
from app.core.background import Job, JobKind, SerialLane, Task
from app.core.saved_settings import key_for, set_ui_value, to_text, ui_value
from app.core.widgets import LevelMeter
from engine.audio.base import AudioSink, AudioSource
from engine.doctor.device_check import (FLOOR_DBFS, MIC_STAGES, SPEAKER_STAGES, MicCheck, MicResult,
                                       SpeakerCheck, SpeakerResult, missing_models)

if TYPE_CHECKING:
    from app.core.window_api import WindowApi

#: Set to 1 to never open the check by itself (tests, the packaged self-test, kiosks).
NO_FIRST_RUN_ENV = "PARLEY_NO_FIRST_RUN"
FIRST_RUN_KEY = "first_run_done"  # ui/first_run_done
METER_MS = 50
JOIN_S = 10.0  # a transcription or a synthesis in flight cannot be cut short
_KINDS = {"input": "microphone", "output": "speaker"}

SourceFactory = Callable[[str], AudioSource]
SinkFactory = Callable[[str], AudioSink]


class SetupCheckDialog(QDialog):
    """Test the microphone and the speaker on the loaded models, then keep the devices.

    ``inputs``/``outputs``: AudioDevice lists for the dropdowns (None: ask the controller
    to discover them). ``source_factory``/``sink_factory`` turn a device setting into the
    AudioSource/AudioSink to test (default: the real MicSource and SpeakerSink); a test
    passes a recording instead of the microphone.
    """

    def __init__(self, controller, settings, parent: QWidget | None = None, *, inputs=None,
                 outputs=None, source_factory: SourceFactory | None = None,
                 sink_factory: SinkFactory | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("setupCheckDialog")
        self.setWindowTitle("Check microphone and speaker")
        self.controller, self.settings = controller, settings
        self.source_factory = source_factory or self._mic_source
        self.sink_factory = sink_factory or _speaker_sink
        self.mic_result: MicResult | None = None
        self.speaker_result: SpeakerResult | None = None
        self.meter_peak_db = FLOOR_DBFS  # the highest level the meter showed (for tests too)
        self._lanes = {kind: SerialLane(self, f"parley-setup-{what}") for kind, what in _KINDS.items()}
        self._tasks: dict[str, Task] = {}  # kind -> the test running
        self._waiting: set[str] = set()  # tests asked for before the models were loaded
        self._switching: dict[str, str] = {}  # kind -> device being switched to
        self._checks: dict[str, MicCheck | SpeakerCheck] = {}  # running, read by the timer
        self._closed = False
        self._build()
        self._timer = QTimer(self)
        self._timer.setInterval(METER_MS)
        self._timer.timeout.connect(self._tick)
        controller.audio_devices_found.connect(self.set_audio_devices)
        controller.audio_switched.connect(self._switched)
        controller.audio_switch_failed.connect(self._switch_failed)
        for signal in (controller.engine_changed, controller.applied, controller.state_changed):
            signal.connect(self._models_changed)
        if inputs is None and outputs is None:
            controller.discover()
        self.set_audio_devices(inputs or [], outputs or [])
        self._models_changed()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        root = QVBoxLayout(self)
        intro = _named(QLabel("Pick the microphone and the speaker Parley should use, then "
                              "test each: say a sentence and see it written, and listen to a "
                              "sample reply."), "Introduction", "setupIntro")
        self.models_note = _named(QLabel(), "Speech models", "setupModelsNote")
        self.input_combo = _named(QComboBox(), "Microphone", "", "The input device to test and use")
        self.meter = _named(LevelMeter(), "Microphone level", "setupMeter")
        self.mic_button = _named(QPushButton("Test microphone"), "Test microphone", "",
                                 "Record a sentence and transcribe it")
        self.transcript = _named(QLabel(), "What the microphone heard", "setupTranscript")
        self.mic_line = _named(QLabel(), "Microphone result", "setupResult")
        self.output_combo = _named(QComboBox(), "Speaker", "", "The output device to test and use")
        self.speaker_button = _named(QPushButton("Play sample reply"), "Play sample reply", "",
                                     "Say a sample reply on this speaker")
        self.speaker_line = _named(QLabel(), "Speaker result", "setupResult")
        self.status = _named(QLabel(), "Status", "setupStatus")
        self.close_button = _named(QPushButton("Close"), "Close", "",
                                   "Close without changing the devices")
        self.use_button = _named(QPushButton("Use these devices"), "Use these devices", "",
                                 "Switch to the chosen devices and save them")
        self.mic_button.clicked.connect(lambda: self._toggle("input"))
        self.speaker_button.clicked.connect(lambda: self._toggle("output"))
        self.close_button.clicked.connect(self.reject)
        self.use_button.clicked.connect(self.use_devices)
        self.use_button.setDefault(True)
        root.addWidget(intro)
        root.addWidget(self.models_note)
        for title, rows in (("Microphone", [[self.input_combo], [self.meter, self.mic_button],
                                            [self.transcript], [self.mic_line]]),
                            ("Speaker", [[self.output_combo, self.speaker_button],
                                         [self.speaker_line]])):
            group = QGroupBox(title)
            grid = QGridLayout(group)
            grid.setColumnStretch(0, 1)
            for row, widgets in enumerate(rows):
                for column, widget in enumerate(widgets):
                    grid.addWidget(widget, row, column, 1, 2 if len(widgets) == 1 else 1)
            root.addWidget(group)
        root.addWidget(self.status)
        root.addStretch(1)  # a taller window grows the space above the buttons, not the rows
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        buttons.addWidget(self.use_button)
        root.addLayout(buttons)
        self.setMinimumWidth(520)

    def set_audio_devices(self, inputs, outputs) -> None:
        """Fill the dropdowns (AudioDevice lists), keeping what is chosen, else the setting."""
        audio = self.controller.config.audio
        fill_audio_combo(self.input_combo, inputs, self.input_combo.currentData() or audio.input_device,
                         "input")
        fill_audio_combo(self.output_combo, outputs,
                         self.output_combo.currentData() or audio.output_device, "output")

    def device(self, kind: str) -> str:
        """The device setting chosen for ``kind`` ("input"/"output")."""
        combo = self.input_combo if kind == "input" else self.output_combo
        return combo.currentData() or "default"

    # ------------------------------------------------------------------ models
    def _models(self) -> dict:
        """The loaded engine's models by stage (none without an engine)."""
        engine = self.controller.engine
        return {} if engine is None else engine.models

    def _models_changed(self, *_args) -> None:
        models = self._models()
        missing = missing_models(models, MIC_STAGES + SPEAKER_STAGES)
        if not missing:
            self.models_note.setVisible(False)
            for kind in sorted(self._waiting):  # "input" first; one test runs at a time
                self._waiting.discard(kind)
                if self._tasks:
                    self._result_line(kind).setText("")
                else:
                    self._start(kind)
            self._update_buttons()
            return
        if self.controller.loading:
            text = ("The speech models are still loading. Press a test button to run the "
                    "test as soon as they are ready.")
        else:
            text = ("The speech models are not loaded. Load them on the Settings tab (Apply); "
                    "a test you press now waits for them.")
        self.models_note.setText(text)
        self.models_note.setVisible(True)

    # ------------------------------------------------------------------ the checks
    def _toggle(self, kind: str) -> None:
        if kind in self._tasks:
            self._tasks[kind].cancel()  # the button says "Stop" while a test runs
            return
        if kind in self._waiting:
            self._waiting.discard(kind)
            self._result_line(kind).setText("")
            self._update_buttons()
            return
        if missing_models(self._models(), MIC_STAGES if kind == "input" else SPEAKER_STAGES):
            self._waiting.add(kind)
            _show(self._result_line(kind), "The test starts when the speech models are "
                  "loaded (press again to give up waiting).", "info")
            self._update_buttons()
            return
        self._start(kind)

    def _start(self, kind: str) -> None:
        if self._closed or self._tasks:
            return  # one test at a time: the microphone would hear the sample reply
        models, config, device = self._models(), self.controller.config, self.device(kind)
        if kind == "input":
            self.transcript.setText("")
            self.meter_peak_db = FLOOR_DBFS
            listening = self.controller.mode == "mic"
            _show(self.mic_line, "Listening: say a sentence…" + (
                " (Parley is listening too: if the microphone fails, stop listening first.)"
                if listening else ""), "info")
        else:
            _show(self.speaker_line, "Preparing the sample reply…", "info")
        test = Job(JobKind.TEST_MICROPHONE if kind == "input" else JobKind.TEST_SPEAKER,
                   lambda task: self._run(kind, device, models, config, task.stop_event),
                   lambda result: self._finished(kind, result),
                   lambda failure: self._finished(kind, _untested(kind, device, failure.error)))
        self._tasks[kind] = self._lanes[kind].submit(test)
        self._timer.start()
        self._update_buttons()

    def _run(self, kind: str, device: str, models: dict, config, cancel: threading.Event):
        """On the test's lane: build the device and the check, run it, return the result."""
        if kind == "input":
            check = MicCheck(self.source_factory(device), models["vad"], models["stt"],
                             config.vad, config.stt, device=device)
        else:
            check = SpeakerCheck(self.sink_factory(device), models["tts"], config.tts,
                                 device=device)
        self._checks[kind] = check
        return check.run(cancel)

    def _tick(self) -> None:
        """The level and the phase of the running test, drawn at the timer's pace."""
        mic, speaker = self._checks.get("input"), self._checks.get("output")
        if isinstance(mic, MicCheck):
            self.meter.set_level(mic.level, True)
            self.meter_peak_db = max(self.meter_peak_db, self.meter.db)
            if mic.phase == "transcribing":
                self.mic_line.setText("Transcribing…")
        if speaker is not None and speaker.phase == "playing":
            self.speaker_line.setText("Playing the sample reply…")

    def _finished(self, kind: str, result) -> None:
        self._tick()  # the last level, for a test shorter than one tick
        self._tasks.pop(kind, None)
        self._checks.pop(kind, None)
        self._lanes[kind].join(JOIN_S)  # it handed its result over: it is ending now
        if not self._tasks:
            self._timer.stop()
        self._update_buttons()
        level = "ok" if result.ok else "info" if result.cancelled else "error"
        if kind == "input":
            self.mic_result = result
            self.meter.set_level(0.0, False)
            if result.transcript:
                self.transcript.setText(f"You said: “{result.transcript}”")
            text = (f"Microphone {result.device!r} works (peak {result.peak_dbfs:.0f} dBFS)."
                    if result.ok else _sentence(result.message))
        else:
            self.speaker_result = result
            text = (f"Played a {result.seconds:.1f} s sample reply on {result.device!r}. Heard "
                    "nothing? Check its volume, or pick another output."
                    if result.ok else _sentence(result.message))
        _show(self._result_line(kind), text, level)

    def _update_buttons(self) -> None:
        busy = bool(self._tasks) or bool(self._switching)
        for kind, button, idle in (("input", self.mic_button, "Test microphone"),
                                   ("output", self.speaker_button, "Play sample reply")):
            running = kind in self._tasks
            waiting = kind in self._waiting
            button.setText("Stop" if running else "Stop waiting" if waiting else idle)
            button.setEnabled(not self._switching and (running or waiting or not self._tasks))
        self.input_combo.setEnabled(not busy)
        self.output_combo.setEnabled(not busy)
        self.use_button.setEnabled(not busy)

    def _result_line(self, kind: str) -> QLabel:
        return self.mic_line if kind == "input" else self.speaker_line

    # ------------------------------------------------------------------ keep the devices
    def use_devices(self) -> None:
        """Switch to the chosen devices (each a transaction); save and close once done."""
        audio = self.controller.config.audio
        chosen = {kind: self.device(kind) for kind in _KINDS}
        self._switching = {k: d for k, d in chosen.items() if d != chosen_device(audio, k)}
        if not self._switching:
            self._save()
            self.accept()
            return
        _show(self.status, "Switching to the chosen devices…", "info")
        self._update_buttons()
        for kind, device in list(self._switching.items()):
            self.controller.switch_audio(kind, device)

    def _switched(self, kind: str, device: str) -> None:
        if self._switching.get(kind) != device:
            return  # a switch this dialog did not ask for
        del self._switching[kind]
        if not self._switching:
            self._save()
            self.accept()

    def _switch_failed(self, kind: str, kept: str, message: str) -> None:
        if kind not in self._switching:
            return
        device = self._switching.pop(kind)
        _show(self._result_line(kind), f"Could not switch the {_KINDS[kind]} to {device!r}, "
              f"kept {kept!r}: {_sentence(message)}", "error")
        _show(self.status, "", "info")
        self._update_buttons()

    def _save(self) -> None:
        """The devices in use now, and that the first-run check was done."""
        audio = self.controller.config.audio
        for kind in _KINDS:
            dotted = f"audio.{kind}_device"
            self.settings.setValue(key_for(dotted), to_text(chosen_device(audio, kind)))
        set_ui_value(self.settings, FIRST_RUN_KEY, True)
        self.settings.sync()

    # ------------------------------------------------------------------ close
    def shutdown(self) -> list[str]:
        """Stop the tests and join their threads; the names of any still running."""
        self._closed = True
        self._waiting.clear()
        self._timer.stop()
        for task in self._tasks.values():
            task.cancel()
        return [lane.name for lane in self._lanes.values() if not lane.shutdown(JOIN_S)]

    def done(self, result: int) -> None:
        """Closing by any way stops the tests first; the check counts as offered."""
        self.shutdown()
        if not ui_value(self.settings, FIRST_RUN_KEY, False):
            # Offered once; the Help menu has it whenever it is wanted again.
            set_ui_value(self.settings, FIRST_RUN_KEY, True)
        super().done(result)

    def _mic_source(self, device: str) -> AudioSource:
        from engine.audio.mic import MicSource

        return MicSource(device, self.controller.config.audio.capture_buffer_s)


def _untested(kind: str, device: str, error: BaseException) -> MicResult | SpeakerResult:
    """The result of a test that could not run (the device did not open...): shown on
    the result line, never as a traceback."""
    what, other = _KINDS[kind], "input" if kind == "input" else "output"
    message = f"{what} {device!r} could not be tested: {error}. Pick another {other}"
    if kind == "input":
        return MicResult(device, False, FLOOR_DBFS, "", 0.0, message=message)
    return SpeakerResult(device, False, 0.0, FLOOR_DBFS, "", message=message)


def _speaker_sink(device: str) -> AudioSink:
    from engine.audio.speaker import SpeakerSink

    return SpeakerSink(device)


# ---------------------------------------------------------------------- widgets
def _named(widget, name: str, object_name: str = "", description: str = ""):
    """``widget`` with its accessible name (and description, tooltip); controls take
    focus by Tab and click, and a button is never the dialog's default by focus alone."""
    widget.setAccessibleName(name)
    if object_name:
        widget.setObjectName(object_name)
    if description:
        widget.setAccessibleDescription(description)
        widget.setToolTip(description)
    if isinstance(widget, QLabel):
        widget.setWordWrap(True)
    elif isinstance(widget, (QComboBox, QPushButton)):
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    if isinstance(widget, QPushButton):
        widget.setAutoDefault(False)
    return widget


def _show(label: QLabel, text: str, level: str) -> None:
    """Text with its QSS class (``level`` ok/info/error), re-polished so the style follows."""
    label.setText(text)
    label.setProperty("level", level)
    label.style().unpolish(label)
    label.style().polish(label)


def _sentence(text: str | None) -> str:
    text = (text or "").strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


# ---------------------------------------------------------------------- the window
def first_run_due(settings, autoload: bool, env=None, platform: str | None = None) -> bool:
    """Whether the check opens by itself: ``ui/first_run_done`` unset, the window loads
    its models (``autoload``), ``PARLEY_NO_FIRST_RUN`` is not 1, and the window can be seen
    (not Qt's "offscreen" platform, which tests use)."""
    env = os.environ if env is None else env
    platform = QGuiApplication.platformName() if platform is None else platform
    return (autoload and env.get(NO_FIRST_RUN_ENV, "") != "1" and platform != "offscreen"
            and not ui_value(settings, FIRST_RUN_KEY, False))


#: The microphones and speakers discovery found: (inputs, outputs), AudioDevice lists.
AudioDevices = Callable[[], tuple[list, list]]


class SetupCheck(QObject):
    """Help > Check microphone and speaker… of a window: ``action``, and ``dialog``, the
    check it opened (None while none is open). The window's Close shuts an open check's
    threads down (the dialog may outlive the window). ``audio_devices()`` fills the
    dialog's dropdowns (None: the dialog asks the controller)."""

    def __init__(self, window: WindowApi, audio_devices: AudioDevices | None = None) -> None:
        super().__init__(window.widget)
        self._window = window
        self._audio_devices = audio_devices
        self.dialog: SetupCheckDialog | None = None
        self.action = QAction("Check microphone and speaker…", window.widget)
        self.action.setObjectName("setupCheckAction")
        self.action.triggered.connect(lambda _checked=False: self.open())
        window.menus["help"].addAction(self.action)
        window.widget.installEventFilter(self)

    def open(self) -> SetupCheckDialog:
        """Show the check dialog (raising the one already open)."""
        dialog = self.dialog
        if dialog is not None and dialog.isVisible():
            dialog.raise_()
            dialog.activateWindow()
            return dialog
        inputs, outputs = self._audio_devices() if self._audio_devices is not None else (None, None)
        w = self._window
        dialog = SetupCheckDialog(w.controller, w.settings, w.widget, inputs=inputs, outputs=outputs)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(self._closed)
        self.dialog = dialog
        dialog.show()
        return dialog

    def _closed(self, _result: int) -> None:
        self.dialog = None

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """On the window's Close, shut the open dialog down; the event goes on."""
        if event.type() == QEvent.Type.Close and obj is self._window.widget and self.dialog is not None:
            self.dialog.shutdown()
        return False


def install(window: WindowApi, *, autoload: bool | None = None, audio_devices: AudioDevices | None = None,
            env=None, platform: str | None = None) -> SetupCheck:
    """Add "Check microphone and speaker…" to ``window.menus["help"]`` and, when
    ``first_run_due``, open the check once the event loop runs; returns the ``SetupCheck``.

    ``autoload``: whether the window loads its models at start (``MainWindow``'s
    argument). None detects it: the controller is loading or holds an engine, which is
    true only when ``install`` runs after ``MainWindow`` called ``controller.apply``.
    ``audio_devices``: see ``SetupCheck``. ``env``/``platform`` stand in for
    ``os.environ`` and Qt's platform (tests).
    """
    check = SetupCheck(window, audio_devices)
    if autoload is None:
        autoload = window.controller.loading or window.controller.engine is not None
    if first_run_due(window.settings, autoload, env, platform):
        QTimer.singleShot(0, window.widget, check.open)
    return check
