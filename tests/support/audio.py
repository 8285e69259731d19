"""Audio for the tests: tones, WAV files, two utterances with a gap, and measures."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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


def rms(audio: np.ndarray) -> float:
    """Root mean square of ``audio``."""
    return float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) if audio.size else 0.0


def speech_with_gap(first: np.ndarray, second: np.ndarray, gap_s: float) -> np.ndarray:
    """Two 16 kHz utterances separated by ``gap_s`` of digital silence."""
    return np.concatenate([first, np.zeros(int(gap_s * 16000), np.float32), second]).astype(np.float32)


def speech_seconds(audio: np.ndarray, rate: int) -> float:
    """Seconds of ``audio`` that Silero VAD calls speech (probability over 0.5): spoken
    audio has seconds of it, silence and noise none."""
    import soxr

    from engine.backends.base import LoadRequest, no_progress
    from engine.backends.vad import silero
    from engine.runtime.devices import Device

    vad = silero.load(LoadRequest("auto", Device("cpu"), "auto", None), no_progress)
    stream = vad.new_stream()
    samples = soxr.resample(audio, rate, 16000).astype(np.float32)
    n = vad.frame_samples
    voiced = sum(stream.speech_probability(samples[i:i + n]) > 0.5
                 for i in range(0, len(samples) - n + 1, n))
    return voiced * n / 16000
