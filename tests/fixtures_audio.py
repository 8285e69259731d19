"""Helpers for the audio I/O tests: tones, WAV files, and the sound devices present.

The device markers skip a test only when the machine has no sound device at all; CI
runs ``.ci/start_audio.sh`` first (a JACK dummy server, or ALSA null devices), so there
the tests always run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def sine(freq: float, seconds: float, rate: int, amplitude: float = 0.3) -> np.ndarray:
    """A float32 sine tone."""
    t = np.arange(round(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """Write float samples (1-D, or frames x channels) as 16-bit PCM and return the path."""
    import soundfile as sf

    sf.write(str(path), samples, rate, subtype="PCM_16")
    return path


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    """The frequency (Hz) of the strongest FFT bin."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1.0 / rate)[int(np.argmax(spectrum))])


def _devices():
    from engine.audio.sd_devices import list_audio_devices

    return list_audio_devices()


INPUTS, OUTPUTS = _devices()
_NO_DEVICE = "no sound device at all (run .ci/start_audio.sh: JACK dummy or ALSA null)"
needs_input = pytest.mark.skipif(not INPUTS, reason=f"no input device: {_NO_DEVICE}")
needs_output = pytest.mark.skipif(not OUTPUTS, reason=f"no output device: {_NO_DEVICE}")
