"""Sound cards through sounddevice (PortAudio): list them and resolve a setting to one.

sounddevice is imported only when a function here runs. A machine without PortAudio or
without any sound card lists no devices rather than crashing; opening a device there is
a clear AudioDeviceError (see ``import_sounddevice`` and ``resolve_device``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.errors import AudioDeviceError


class DeviceKind(enum.StrEnum):
    """The direction of a sound device (equal to its string, as settings spell it)."""

    INPUT = "input"
    OUTPUT = "output"


_DEFAULT_NAMES = ("", "default", "auto")


@dataclass(frozen=True, slots=True)
class AudioDevice:
    """One PortAudio device as seen from one direction (input or output)."""

    index: int
    name: str
    host_api: str
    channels: int  # input channels for an input device, output channels for an output
    default_rate: float
    is_default: bool

    @property
    def label(self) -> str:
        """Human label for menus and error messages: ``0: system (JACK, 2 ch, 16000 Hz)``."""
        star = ", default" if self.is_default else ""
        return (f"{self.index}: {self.name} ({self.host_api}, {self.channels} ch, "
                f"{self.default_rate:g} Hz{star})")


def import_sounddevice():
    """Import sounddevice, or raise AudioDeviceError saying what to install."""
    try:
        import sounddevice
    except ImportError:
        raise AudioDeviceError(
            "sound devices need the Python package 'sounddevice'; install it with: "
            "pip install sounddevice"
        ) from None
    except OSError:
        # sounddevice raises OSError when the PortAudio shared library is missing.
        raise AudioDeviceError(
            "the PortAudio library is not installed, so no sound device can be opened; "
            "install it (Debian/Ubuntu: apt-get install libportaudio2)"
        ) from None
    return sounddevice


def list_audio_devices(refresh: bool = False) -> tuple[list[AudioDevice], list[AudioDevice]]:
    """``(inputs, outputs)`` present now; both empty when there is no card or no PortAudio.

    PortAudio scans devices once, when it is initialised. ``refresh=True`` re-scans (for
    a card plugged in, or a JACK server started, after the first scan); it must not be
    used while a stream is open.
    """
    try:
        sd = import_sounddevice()
    except AudioDeviceError:
        return [], []
    if refresh:
        sd._terminate()
        sd._initialize()
    try:
        devices = sd.query_devices()
        host_apis = sd.query_hostapis()
        default_in, default_out = _default_indices(sd)
    except sd.PortAudioError:
        return [], []
    inputs, outputs = [], []
    for info in devices:
        api = host_apis[info["hostapi"]]["name"]
        index = info["index"]
        if info["max_input_channels"] > 0:
            inputs.append(AudioDevice(index, info["name"], api, info["max_input_channels"],
                                      info["default_samplerate"], index == default_in))
        if info["max_output_channels"] > 0:
            outputs.append(AudioDevice(index, info["name"], api, info["max_output_channels"],
                                       info["default_samplerate"], index == default_out))
    return inputs, outputs


def is_default_setting(setting: str | int | None) -> bool:
    """True where a device setting means the system's default: None, "", "default", "auto"."""
    return setting is None or (isinstance(setting, str) and setting.strip().lower() in _DEFAULT_NAMES)


def describe_devices(devices: list[AudioDevice], kind: DeviceKind) -> str:
    """``"input devices present: 0: system (...); 1: ..."`` or that there are none."""
    if not devices:
        return f"no {kind} devices are present (no sound card, or no sound server running)"
    return f"{kind} devices present: " + "; ".join(d.label for d in devices)


def resolve_device(name_or_index: str | int | None, kind: DeviceKind | str) -> AudioDevice:
    """The device a setting names: ``default``/None, an index, or (part of) a name.

    A name matches exactly (ignoring case) first, then as a unique substring. Anything
    else is an AudioDeviceError that lists the ``kind`` devices present.
    """
    try:
        kind = DeviceKind(kind)
    except ValueError:
        raise ValueError(f"kind must be 'input' or 'output', got {kind!r}") from None
    import_sounddevice()  # a missing PortAudio is its own, clearer error
    inputs, outputs = list_audio_devices()
    devices = inputs if kind is DeviceKind.INPUT else outputs
    wanted = name_or_index
    if isinstance(wanted, str) and wanted.strip().lstrip("-").isdigit():
        wanted = int(wanted.strip())
    if is_default_setting(wanted):
        for device in devices:
            if device.is_default:
                return device
        if devices:
            return devices[0]
        raise AudioDeviceError(f"there is no default {kind} device; {describe_devices(devices, kind)}")
    if isinstance(wanted, int):
        for device in devices:
            if device.index == wanted:
                return device
        raise AudioDeviceError(
            f"{kind} device index {wanted} does not exist; {describe_devices(devices, kind)}"
        )
    text = str(wanted).strip().lower()
    exact = [d for d in devices if d.name.lower() == text]
    if len(exact) == 1:
        return exact[0]
    partial = exact or [d for d in devices if text in d.name.lower()]
    if len(partial) == 1:
        return partial[0]
    if partial:
        raise AudioDeviceError(
            f"{kind} device {wanted!r} is ambiguous; it matches "
            + "; ".join(d.label for d in partial) + ". Use the index instead"
        )
    raise AudioDeviceError(f"no {kind} device is called {wanted!r}; {describe_devices(devices, kind)}")


def _default_indices(sd) -> tuple[int, int]:
    """PortAudio's default input and output indices (-1 where there is none)."""
    defaults = sd.default.device
    out = []
    for value in (defaults[0], defaults[1]):
        # Names set by a user of sounddevice are not indices; treat them as unknown.
        out.append(value if isinstance(value, int) else -1)
    return out[0], out[1]
