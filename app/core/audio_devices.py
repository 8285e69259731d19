"""Sound devices in the GUI: the microphone and speaker dropdowns (filled alike on the
Settings tab and in the device check), the ``audio.*`` settings kept apart from model
changes, and the microphone/speaker pair a start opens."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from app.core.push_to_talk import PushToTalkSource
from engine.config import AudioConfig, EngineConfig
from engine.config_diff import Effect, effect_of


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


#: Settings that reopen the microphone (the rest of ``audio.*`` reopens the speaker).
INPUT_KEYS = ("audio.input_device", "audio.capture_buffer_s")


# ---------------------------------------------------------------------- audio settings
def chosen_device(audio: AudioConfig, kind: str) -> str:
    """The device ``audio`` names for ``kind``: "input" (the microphone) or "output" (the speaker)."""
    if kind == "input":
        return audio.input_device
    if kind == "output":
        return audio.output_device
    raise ValueError(f"a sound device is an 'input' or an 'output', not {kind!r}")


def audio_items(config: EngineConfig) -> dict[str, Any]:
    """``config``'s sound-device settings, ``{dotted: value}``."""
    return {k: v for k, v in config.flat().items() if effect_of(k) is Effect.AUDIO}


def audio_changes(old: EngineConfig, new: EngineConfig) -> dict[str, Any]:
    """The sound-device settings ``new`` changes from ``old``."""
    before = audio_items(old)
    return {k: v for k, v in audio_items(new).items() if before[k] != v}


def with_audio_of(config: EngineConfig, source: EngineConfig) -> EngineConfig:
    """``config`` with the sound-device settings of ``source`` (``config`` itself if they
    are the same already)."""
    audio = audio_items(source)
    return config if audio_items(config) == audio else config.with_overrides(audio)


def mic_pair(config: EngineConfig, push_to_talk: bool):
    """A microphone behind a push-to-talk gate, and a speaker, for ``config``'s devices.
    Nothing is opened here: ``Engine.start`` opens them."""
    from engine.audio.mic import MicSource
    from engine.audio.speaker import SpeakerSink

    mic = MicSource(config.audio.input_device, config.audio.capture_buffer_s)
    return PushToTalkSource(mic, enabled=push_to_talk), SpeakerSink(config.audio.output_device)
