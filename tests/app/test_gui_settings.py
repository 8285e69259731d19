"""The settings panel, QSettings persistence, invalid settings and audio device switches."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QSettings, Qt

from app.window.main_window import MainWindow
from app.core.saved_settings import engine_keys, key_for, load_config, save_config
from app.settings.panel import SettingsPanel
from engine.config import STAGES, BargeIn, EngineConfig, config_fields
from tests.support.gui import panel_devices
from tests.support.sound_devices import INPUTS


def combo_items(combo):
    """(data, text, enabled, tooltip) of every entry."""
    model = combo.model()
    return [(combo.itemData(i), combo.itemText(i), model.item(i).isEnabled(),
             combo.itemData(i, Qt.ItemDataRole.ToolTipRole)) for i in range(combo.count())]


def select(combo, data) -> None:
    index = combo.findData(data)
    assert index >= 0, f"{data!r} not in {[combo.itemData(i) for i in range(combo.count())]}"
    combo.setCurrentIndex(index)


@pytest.fixture
def panel(qtbot):
    w = SettingsPanel(EngineConfig(), devices=panel_devices())
    qtbot.addWidget(w)
    return w


def test_device_dropdowns_list_exactly_what_discovery_reports(panel):
    devices = panel_devices()
    for combo in [panel.global_device, *panel.device.values()]:
        items = combo_items(combo)
        assert [d for d, *_ in items] == ["auto", *[str(i.device) for i in devices]]
        assert [t for _d, t, *_ in items[1:]] == [i.label for i in devices]
    # A device that is not present is disabled everywhere, and the tooltip says why.
    for combo in [panel.global_device, *panel.device.values()]:
        mps = next(x for x in combo_items(combo) if x[0] == "mps")
        assert mps[2] is False and "MPS exists only on macOS" in mps[3]
    # The label carries the GPU's name and free memory.
    assert combo_items(panel.device["stt"])[2][1] == "cuda:0 — NVIDIA H200 (120.0 GiB free)"
    # Silero runs on the CPU only: GPUs and MLX are present but not valid for the VAD.
    vad = {d: (enabled, tip) for d, _t, enabled, tip in combo_items(panel.device["vad"])}
    assert vad["cpu"][0] is True
    for name in ("cuda:0", "cuda:1", "mlx"):
        assert vad[name][0] is False and "silero does not run on" in vad[name][1]
    # STT on auto: faster-whisper and transformers use CUDA, mlx-whisper uses MLX.
    stt = {d: enabled for d, _t, enabled, _tip in combo_items(panel.device["stt"])}
    assert stt == {"auto": True, "cpu": True, "cuda:0": True, "cuda:1": True, "mps": False, "mlx": True}


def test_backend_choice_narrows_the_devices(panel):
    select(panel.backend["stt"], "mlx-whisper")
    stt = {d: (enabled, tip) for d, _t, enabled, tip in combo_items(panel.device["stt"])}
    assert stt["mlx"][0] is True
    assert stt["cpu"] == (False, "mlx-whisper does not run on cpu; it runs on mlx")
    select(panel.backend["stt"], "faster-whisper")
    stt = {d: enabled for d, _t, enabled, _tip in combo_items(panel.device["stt"])}
    assert stt["cpu"] and stt["cuda:1"] and not stt["mlx"]


def test_choosing_devices_and_applying_yields_the_matching_config(panel, qtbot):
    select(panel.global_device, "cpu")
    select(panel.device["stt"], "cuda:0")
    select(panel.backend["llm"], "transformers")
    select(panel.device["llm"], "cuda:1")
    select(panel.device["tts"], "cpu")
    panel.live.setChecked(True)
    with qtbot.waitSignal(panel.apply_requested, timeout=1000) as blocker:
        panel.apply_button.click()
    config = blocker.args[0]
    expected = EngineConfig().with_overrides({
        "device": "cpu", "stt.device": "cuda:0", "llm.backend": "transformers",
        "llm.device": "cuda:1", "tts.device": "cpu", "turns.live_transcription": True})
    assert config == expected


def test_every_config_field_has_an_editor_and_a_settings_key(panel):
    edited = set(panel.overrides())
    dotted = {d for d, _f, _t in config_fields()}
    # The VAD has no model field; several units run only in realtime mode (the Server tab).
    assert edited == dotted - {"vad.model", "units"}
    assert "units" not in panel.fields
    assert len(set(engine_keys())) == len(dotted)
    assert key_for("stt.device") == "stt/device" and key_for("units") == "units"


def test_settings_survive_a_restart(tmp_path, qtbot):
    path = str(tmp_path / "settings.ini")
    first = SettingsPanel(EngineConfig(), devices=panel_devices())
    qtbot.addWidget(first)
    select(first.device["stt"], "cuda:0")
    first.live.setChecked(True)
    first.fields["llm.system_prompt"].setText("You are terse, friendly, and brief.")
    first.fields["vad.threshold"].setValue(0.62)
    first.fields["turns.speculative"].setChecked(True)
    from app.settings.fields import set_editor_value
    set_editor_value(first.barge_in, BargeIn.MUTE_WHILE_SPEAKING)
    config = first.config_from_widgets()
    save_config(QSettings(path, QSettings.Format.IniFormat), config)

    restored, problems = load_config(QSettings(path, QSettings.Format.IniFormat))  # a new process
    assert problems == []
    assert restored == config
    assert restored.llm.system_prompt == "You are terse, friendly, and brief."
    assert restored.turns.barge_in is BargeIn.MUTE_WHILE_SPEAKING
    second = SettingsPanel(restored, devices=panel_devices())
    qtbot.addWidget(second)
    assert second.device["stt"].currentData() == "cuda:0"
    assert second.live.isChecked()
    assert second.config_from_widgets() == config
    raw = QSettings(path, QSettings.Format.IniFormat)
    assert raw.value("stt/device") == "cuda:0" and raw.value("turns/live_transcription") == "true"


def test_a_bad_stored_value_is_reported_and_skipped(gui_settings):
    gui_settings.setValue("vad/threshold", "loud")
    gui_settings.setValue("llm/max_new_tokens", "32")
    config, problems = load_config(gui_settings)
    assert config.llm.max_new_tokens == 32
    assert config.vad.threshold == EngineConfig().vad.threshold
    assert len(problems) == 1 and "vad/threshold" in problems[0] and "number" in problems[0]


@pytest.fixture
def window(qtbot, gui_settings):
    w = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: not w.controller.worker.busy, timeout=60000)  # device discovery
    yield w
    w.close()


def test_invalid_settings_show_a_message_and_change_nothing(window, qtbot, gui_settings):
    panel = window.panel
    before = window.controller.config
    stored_before = {k: gui_settings.value(k) for k in gui_settings.allKeys()}
    select(panel.backend["stt"], "mlx-whisper")
    cpu = panel.device["stt"].findData("cpu")
    assert not panel.device["stt"].model().item(cpu).isEnabled()
    panel.device["stt"].setCurrentIndex(cpu)  # what a stale selection would hold
    with qtbot.waitSignal(window.controller.apply_failed, timeout=60000):
        panel.apply_button.click()
    assert panel.message.property("level") == "error"
    assert "mlx-whisper" in panel.message.text() and "cpu" in panel.message.text()
    assert window.controller.config == before
    assert window.controller.engine is None
    assert {k: gui_settings.value(k) for k in gui_settings.allKeys()} == stored_before
    assert panel.apply_button.isEnabled()


def test_a_failed_audio_switch_keeps_the_old_device(window, qtbot, gui_settings):
    panel = window.panel
    combo = panel.input_device
    assert combo.currentData() == "default"
    # A device that vanished between the scan and the switch (unplugged).
    combo.addItem("Studio USB mic", "no-such-microphone-xyz")
    combo.setCurrentIndex(combo.count() - 1)
    with qtbot.waitSignal(window.controller.audio_switch_failed, timeout=10000) as blocker:
        combo.activated.emit(combo.currentIndex())
    kind, kept, _message = blocker.args
    assert (kind, kept) == ("input", "default")
    assert combo.currentData() == "default"
    assert window.controller.config.audio.input_device == "default"
    assert panel.message.property("level") == "error" and "no-such-microphone-xyz" in panel.message.text()
    assert gui_settings.value("audio/input_device") in (None, "default")


def test_a_working_audio_switch_is_kept_and_saved(window, qtbot, gui_settings):
    if not INPUTS:
        pytest.skip("no input device (run .ci/start_audio.sh)")
    name = INPUTS[0].name
    combo = window.panel.input_device
    select(combo, name)
    with qtbot.waitSignal(window.controller.audio_switched, timeout=10000):
        combo.activated.emit(combo.currentIndex())
    assert window.controller.config.audio.input_device == name
    assert gui_settings.value("audio/input_device") == name
    assert all(getattr(window.controller.config, s) == getattr(EngineConfig(), s) for s in STAGES)


def test_pending_changes_say_what_apply_will_do(panel, qtbot):
    assert panel.pending.isHidden() and panel.pending_changes().empty
    panel.fields["llm.temperature"].setValue(0.7)
    assert panel.pending.text() == "llm.temperature: applies now"
    assert not panel.pending.isHidden()
    select(panel.device["stt"], "cuda:0")
    panel.fields["stt.dtype"].setText("float32")
    text = panel.pending.text()
    assert "stt.device: reloads the STT model" in text
    assert "stt.dtype: reloads the STT model" in text
    assert text.count(" · ") == 2
    panel.fields["llm.temperature"].setValue(panel.config.llm.temperature)  # edited back
    assert "llm.temperature" not in panel.pending.text()
    panel.fields["llm.system_prompt"].setText("Be brief.")
    assert panel.pending_changes().keys() == ("stt.device", "stt.dtype", "llm.system_prompt")
    panel.revert_button.click()
    assert panel.pending.isHidden() and panel.pending_changes().empty
    # Once applied, nothing is pending; a device switch keeps the other edits pending.
    panel.fields["vad.threshold"].setValue(0.7)
    panel.set_applied(panel.config.with_overrides({"audio.input_device": "default"}))
    assert panel.pending.text() == "vad.threshold: applies now"
    panel.set_config(panel.config_from_widgets())
    assert panel.pending.isHidden()
