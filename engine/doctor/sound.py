"""The doctor's sound check: PortAudio (through sounddevice), the microphones and speakers
it lists, and whether the devices the settings name are there."""

from __future__ import annotations

from engine.config import EngineConfig
from engine.doctor.probes import Probes
from engine.doctor.report import Finding, Section, ok, problem

_NO_DEVICE_FIX = {
    "Linux": "plug one in, and check that the sound server runs (PipeWire or PulseAudio: pactl info; "
             "JACK: jack_lsp) and that your user may use it",
    "Darwin": "plug one in or pick it in System Settings > Sound",
    "Windows": "plug one in and enable it in Settings > System > Sound",
}
_PORTAUDIO_FIX = {
    "Linux": "sudo apt install libportaudio2 (Fedora: sudo dnf install portaudio; Arch: sudo pacman -S "
             "portaudio)",
    "Darwin": "pip install --force-reinstall sounddevice (its wheel carries PortAudio), or brew install "
              "portaudio",
    "Windows": "pip install --force-reinstall sounddevice (its wheel carries PortAudio)",
}
_WHAT = {"input": "microphone", "output": "speaker"}


def check_sound(probes: Probes, config: EngineConfig) -> Section:
    """PortAudio's version, every input and output device, and the configured ones."""
    scan = probes.audio(config)
    facts = {"portaudio": scan.portaudio or None, "missing": scan.missing or None,
             "inputs": [d.label for d in scan.inputs], "outputs": [d.label for d in scan.outputs],
             "configured": {c.kind: {"setting": c.setting, "device": c.label or None,
                                     "error": c.error or None} for c in scan.configured}}
    if scan.missing == "sounddevice":
        return Section("sound", "Sound", (problem(
            "the Python package sounddevice is not installed: no microphone or speaker can be opened",
            "pip install sounddevice"),), facts)
    if scan.missing == "portaudio":
        return Section("sound", "Sound", (problem(
            "the PortAudio library is not installed: no microphone or speaker can be opened",
            _PORTAUDIO_FIX.get(probes.system, _PORTAUDIO_FIX["Linux"])),), facts)
    if scan.error:
        return Section("sound", "Sound", (problem(
            f"PortAudio cannot list the sound devices: {scan.error}",
            "restart the sound server (or the computer), then check again"),), facts)
    findings: list[Finding] = [ok(f"PortAudio: {scan.portaudio}")]
    fix = _NO_DEVICE_FIX.get(probes.system, _NO_DEVICE_FIX["Linux"])
    for kind, devices in (("input", scan.inputs), ("output", scan.outputs)):
        if not devices:
            findings.append(problem(f"no {_WHAT[kind]} found (PortAudio lists no {kind} device)", fix))
        else:
            findings.append(ok(f"{kind}s: " + "; ".join(d.label for d in devices)))
    for device in scan.configured:
        if device.error and (scan.inputs if device.kind == "input" else scan.outputs):
            findings.append(problem(f"the {_WHAT[device.kind]} set in the settings "
                                    f"(audio.{device.kind}_device = {device.setting!r}) is not there: "
                                    f"{device.error}",
                                    f"pick one that is listed: --audio-{device.kind}-device INDEX or "
                                    "Settings > Audio in the app"))
        elif device.label:
            findings.append(ok(f"{_WHAT[device.kind]} in use: {device.label}"))
    return Section("sound", "Sound", tuple(findings), facts)
