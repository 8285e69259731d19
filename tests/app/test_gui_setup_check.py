"""The first-run check dialog (app.onboarding.device_check), driven through its real widgets: the
bundled recording as the microphone, the real offline VAD, STT and TTS models, the fake
sound device for the devices that fail."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractButton, QComboBox, QDialog, QLineEdit, QMainWindow, QMenu, QWidget)

from app.core.bridge import EventBridge
from app.core.controller import EngineController
from app.core.saved_settings import ui_value
from app.onboarding.device_check import FIRST_RUN_KEY, SetupCheckDialog, first_run_due, install
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.models.model_registry import ModelRegistry
from tests.support.device_check import check_models
from tests.support.fake_sound import install_fake_sound
from tests.support.threads import parley_threads
from tests.support.transcripts import normalize_spelled

WAIT_MS = 30_000


class _Loaded:
    """Stands in for a loaded Engine: the check only reads ``models``."""

    def __init__(self, models: dict) -> None:
        self.models = models

    def stop(self, _timeout: float) -> list[str]:
        return []

    def release_models(self) -> None:
        pass


@pytest.fixture(scope="module")
def models():
    return check_models(ModelRegistry())


@pytest.fixture
def controller(qapp):
    controller = EngineController(EngineConfig(), EventBridge())
    yield controller
    controller.shutdown()


@pytest.fixture
def sound(monkeypatch):
    return install_fake_sound(monkeypatch)


def _dialog(qtbot, controller, settings, sound, **kwargs) -> SetupCheckDialog:
    inputs, outputs = sound.list_devices()
    dialog = SetupCheckDialog(controller, settings, inputs=inputs, outputs=outputs, **kwargs)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def _check_threads() -> list[str]:
    return [t for t in parley_threads() if t.startswith("parley-setup")]


def _choose(combo: QComboBox, data: str) -> None:
    combo.setCurrentIndex(combo.findData(data))


@pytest.mark.slow
def test_the_recording_is_transcribed_the_reply_played_and_the_devices_saved(
        qtbot, controller, models, gui_settings, sound, one_two_three_path):
    controller.engine = _Loaded(models)
    sinks: list[FileSink] = []

    def sink_factory(device: str) -> FileSink:
        sinks.append(FileSink(None, realtime=True))
        return sinks[-1]

    dialog = _dialog(qtbot, controller, gui_settings, sound,
                     source_factory=lambda device: FileSource(one_two_three_path, realtime=True),
                     sink_factory=sink_factory)
    assert not dialog.models_note.isVisible()
    assert dialog.input_combo.currentText() == "System default (Fake input)"

    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    assert dialog.mic_button.text() == "Stop" and not dialog.speaker_button.isEnabled()
    assert not dialog.use_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.mic_result is not None, timeout=WAIT_MS)
    result = dialog.mic_result
    assert result.ok, result.message
    assert {"one", "two", "three"} <= set(normalize_spelled(result.transcript).split())
    assert result.transcript in dialog.transcript.text()
    assert dialog.mic_line.text().startswith("Microphone ") and "works" in dialog.mic_line.text()
    assert dialog.mic_line.property("level") == "ok"
    assert dialog.meter_peak_db > -40  # the meter moved well above silence
    assert dialog.meter.text.text() == "mic off"  # and rests once the test is over
    assert dialog.mic_button.text() == "Test microphone" and dialog.speaker_button.isEnabled()

    qtbot.mouseClick(dialog.speaker_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.speaker_result is not None, timeout=WAIT_MS)
    assert dialog.speaker_result.ok, dialog.speaker_result.message
    audio = sinks[0].audio
    assert audio.size > sinks[0].sample_rate  # more than a second was "heard"
    assert float(np.sqrt(np.mean(audio ** 2))) > 0.01
    assert "Played a" in dialog.speaker_line.text()
    assert not _check_threads()

    _choose(dialog.input_combo, "Fake input")
    _choose(dialog.output_combo, "Fake output")
    qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.result() == QDialog.DialogCode.Accepted, timeout=WAIT_MS)
    assert controller.config.audio.input_device == "Fake input"
    assert controller.config.audio.output_device == "Fake output"
    gui_settings.sync()
    assert gui_settings.value("audio/input_device") == "Fake input"
    assert gui_settings.value("audio/output_device") == "Fake output"
    assert ui_value(gui_settings, FIRST_RUN_KEY, False) is True


@pytest.mark.slow
def test_failing_devices_are_named_with_what_to_try(qtbot, controller, models, gui_settings,
                                                    sound):
    controller.engine = _Loaded(models)
    dialog = _dialog(qtbot, controller, gui_settings, sound)  # the real MicSource, SpeakerSink
    _choose(dialog.input_combo, "Fake input")
    _choose(dialog.output_combo, "Fake output")
    sound.unplug()  # listed, then gone
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.mic_result is not None, timeout=WAIT_MS)
    assert dialog.mic_line.text().startswith("Microphone 'Fake input' could not be opened: ")
    assert "pick another input" in dialog.mic_line.text()
    assert dialog.mic_line.property("level") == "error"
    qtbot.mouseClick(dialog.speaker_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.speaker_result is not None, timeout=WAIT_MS)
    assert dialog.speaker_line.text().startswith("Speaker 'Fake output' could not be opened: ")
    assert "pick another output" in dialog.speaker_line.text()

    dialog.source_factory = lambda device: FileSource(np.zeros(32000, np.float32), realtime=False)
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "silence" in dialog.mic_line.text(), timeout=WAIT_MS)
    assert dialog.mic_line.text().startswith("Microphone 'Fake input' gave only silence (peak ")
    assert "not muted" in dialog.mic_line.text()

    def bad_setting(device: str):
        raise ConfigError(f"'audio.capture_buffer_s' must be > 0; got 0 (for {device})")

    dialog.source_factory = bad_setting
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "could not be tested" in dialog.mic_line.text(), timeout=WAIT_MS)
    assert "'audio.capture_buffer_s' must be > 0" in dialog.mic_line.text()
    assert dialog.mic_button.isEnabled() and dialog.mic_button.text() == "Test microphone"
    dialog.reject()
    assert not _check_threads()


@pytest.mark.slow
def test_a_test_pressed_before_the_models_load_waits_for_them(qtbot, controller, models,
                                                              gui_settings, sound,
                                                              one_two_three_path):
    dialog = _dialog(qtbot, controller, gui_settings, sound,
                     source_factory=lambda d: FileSource(one_two_three_path, realtime=False))
    assert dialog.models_note.isVisible() and "not loaded" in dialog.models_note.text()
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    assert "starts when the speech models are loaded" in dialog.mic_line.text()
    assert dialog.mic_button.text() == "Stop waiting" and not _check_threads()
    controller.engine = _Loaded(models)
    controller.engine_changed.emit(controller.engine)
    assert not dialog.models_note.isVisible()
    qtbot.waitUntil(lambda: dialog.mic_result is not None, timeout=WAIT_MS)
    assert dialog.mic_result.ok, dialog.mic_result.message


@pytest.mark.slow
def test_closing_stops_a_running_test_and_joins_its_thread(qtbot, controller, models,
                                                           gui_settings, sound, jfk_path):
    controller.engine = _Loaded(models)
    dialog = _dialog(qtbot, controller, gui_settings, sound,
                     source_factory=lambda d: FileSource(jfk_path, realtime=True))
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.meter_peak_db > -60, timeout=WAIT_MS)
    assert _check_threads() == ["parley-setup-microphone"]
    dialog.close()
    assert not _check_threads()
    assert ui_value(gui_settings, FIRST_RUN_KEY, False) is True  # offered once
    assert gui_settings.value("audio/input_device") is None  # nothing chosen was saved


def test_every_interactive_widget_has_a_name_and_a_tab_stop(qtbot, controller, gui_settings,
                                                            sound):
    dialog = _dialog(qtbot, controller, gui_settings, sound)
    interactive = [w for w in dialog.findChildren(QWidget)
                   if isinstance(w, (QAbstractButton, QComboBox, QLineEdit))
                   and not isinstance(w.parent(), QComboBox)]
    assert len(interactive) == 6  # two dropdowns, two tests, Close, Use these devices
    chain, widget = [], dialog.nextInFocusChain()
    while widget is not dialog and len(chain) < 100:
        chain.append(widget)
        widget = widget.nextInFocusChain()
    for w in interactive:
        assert w.accessibleName().strip(), f"{type(w).__name__} {w.objectName()!r} has no name"
        assert w.focusPolicy() & Qt.FocusPolicy.TabFocus, w.accessibleName()
        assert w in chain, w.accessibleName()
    assert dialog.meter.accessibleName() == "Microphone level"


class _Window(QMainWindow):
    """What ``install`` needs of MainWindow (``WindowApi``): menus, settings, a controller."""

    def __init__(self, controller, settings) -> None:
        super().__init__()
        self.controller, self.settings = controller, settings
        self.menus = {"help": self.menuBar().addMenu("&Help")}

    @property
    def widget(self) -> QMainWindow:
        return self


def test_install_adds_the_help_action_once_and_pops_up_only_when_due(qtbot, controller,
                                                                    gui_settings):
    window = _Window(controller, gui_settings)
    qtbot.addWidget(window)
    check = install(window)  # offscreen, and not loading: never by itself
    help_menu: QMenu = window.menus["help"]
    assert [a.text() for a in help_menu.actions()] == ["Check microphone and speaker…"]
    qtbot.wait(20)
    assert check.dialog is None

    check.action.trigger()
    dialog = check.dialog
    assert isinstance(dialog, SetupCheckDialog) and dialog.isVisible()
    assert check.open() is dialog  # raised, not a second one
    window.close()  # the window's close shuts the dialog's tests down
    dialog.reject()
    assert check.dialog is None

    fresh = type(gui_settings)(gui_settings.fileName() + ".2", gui_settings.format())
    assert first_run_due(fresh, True, env={}, platform="xcb")
    assert not first_run_due(fresh, False, env={}, platform="xcb")  # autoload=False
    assert not first_run_due(fresh, True, env={"PARLEY_NO_FIRST_RUN": "1"}, platform="xcb")
    assert not first_run_due(fresh, True, env={}, platform="offscreen")
    assert not first_run_due(gui_settings, True, env={}, platform="xcb")  # already done

    for autoload, env, pops in ((False, {}, False), (True, {"PARLEY_NO_FIRST_RUN": "1"}, False),
                                (True, {}, True)):
        other = _Window(controller, fresh)
        qtbot.addWidget(other)
        other_check = install(other, autoload=autoload, env=env, platform="xcb")
        qtbot.wait(20)
        assert (other_check.dialog is not None) is pops, (autoload, env)
    other_check.dialog.reject()
    assert ui_value(fresh, FIRST_RUN_KEY, False) is True  # offered once: not again
    assert not first_run_due(fresh, True, env={}, platform="xcb")
