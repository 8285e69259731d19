"""Audio as numbers: PCM16 and float32, loudness (RMS, dBFS) and 16-bit WAV bytes.

Every conversion between the pipeline's float32 samples (full scale ±1.0) and 16-bit
integers goes through here, so that one scale rule holds across the wire, the echo
canceller and the remote backends:

**Full scale is 32767 both ways.** float -> int16: ``round(clip(x, -1, 1) * 32767)``
(half to even; NaN becomes 0, ±inf full scale); int16 -> float: ``n / 32767``.

Why this rule: it is symmetric. ``x`` and ``-x`` give ``n`` and ``-n``, 0.0 gives 0, ±1.0
give ±32767 and decode to ±1.0 exactly, so float -> int16 -> float is within half a step
(1.5e-5) everywhere and exact at silence and full scale, and int16 -> float -> int16 is
exact for every code but -32768 (which decodes to -1.00003, just past full scale, and
is written back as -32767). The other common rule, 32768 both ways, cannot write +1.0
(it clips to 32767, 0.99997) while -1.0 is exact: a full-scale signal loses its positive
peaks only. The encoder is byte-identical to what Parley always sent (the Realtime API's
PCM16, the WAV uploaded to a remote STT server, the streamed WAV and PCM of
``/audio/speech``); only decoding moved, from ``/ 32768`` to ``/ 32767`` (a gain of
1.00003). Files are read by libsndfile (``engine.audio.decode``), with its own rule for
each format.

PCM16 bytes are little-endian signed 16-bit mono samples (the Realtime API's
``audio/pcm``, OpenAI's ``pcm`` response format and the data of a 16-bit WAV).
"""

from __future__ import annotations

import math
import struct

import numpy as np

FULL_SCALE = 32767  # the int16 value of float 1.0 (and -FULL_SCALE of -1.0)
FLOOR_DBFS = -120.0  # what digital silence measures in dBFS (log10(0) has no value)
_OPEN_SIZE = 0xFFFFFFFF  # a streamed WAV's sizes: unknown when the header is sent


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float samples (full scale ±1.0) -> little-endian int16, by the module's rule."""
    clipped = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)  # ±inf -> ±1; NaN stays
    scaled = np.nan_to_num(clipped, nan=0.0) * np.float32(FULL_SCALE)
    return np.rint(scaled).astype("<i2")


def from_int16(samples: np.ndarray) -> np.ndarray:
    """int16 samples -> float32, ``n / 32767`` (see the module doc)."""
    return np.asarray(samples).astype(np.float32) / np.float32(FULL_SCALE)


def to_pcm16(audio: np.ndarray) -> bytes:
    """float samples -> PCM16 bytes (little-endian int16), by the module's rule."""
    return to_int16(audio).tobytes()


def from_pcm16(data: bytes) -> np.ndarray:
    """PCM16 bytes -> float32 samples. An odd number of bytes is a ValueError (half a
    sample is a framing fault; a stream decoder keeps the odd byte for the next call)."""
    if len(data) % 2:
        raise ValueError(f"PCM16 audio has an odd number of bytes ({len(data)})")
    return from_int16(np.frombuffer(data, dtype="<i2"))


# ---------------------------------------------------------------------- loudness
def power(samples: np.ndarray) -> float:
    """Mean square of ``samples`` (accumulated in float64); 0.0 for no samples."""
    samples = np.asarray(samples)
    if samples.size == 0:
        return 0.0
    return float(np.mean(np.square(samples, dtype=np.float64)))


def rms(samples: np.ndarray) -> float:
    """Root mean square of ``samples``; 0.0 for no samples (NaN in, NaN out)."""
    return math.sqrt(power(samples))


def level(samples: np.ndarray) -> float:
    """RMS for a level meter: clamped to 0..1, so a block of NaN reads 0 and one of
    infinities, or of values far beyond full scale, reads 1 (a faulty device is reported
    separately, by ``engine.audio.health``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        value = rms(samples)
    return 0.0 if value != value else min(value, 1.0)  # value != value: NaN


def frame_rms(samples: np.ndarray, frame: int) -> np.ndarray:
    """RMS of each consecutive ``frame`` samples (float64); a partial last frame is taken
    over its own length. Empty for no samples."""
    if frame < 1:
        raise ValueError(f"frame must be at least 1 sample; got {frame}")
    samples = np.asarray(samples, dtype=np.float64).reshape(-1)
    n = -(-samples.size // frame)
    padded = np.zeros(n * frame, np.float64)
    padded[:samples.size] = samples
    counts = np.full(n, frame, np.float64)
    if n:
        counts[-1] = samples.size - (n - 1) * frame
    return np.sqrt(np.square(padded.reshape(n, frame)).sum(axis=1) / counts)


def dbfs(value: float, floor: float = FLOOR_DBFS) -> float:
    """An RMS or peak ``value`` (full scale 1.0) in dB relative to full scale, never below
    ``floor``; silence, a negative value and NaN give ``floor``."""
    return max(floor, 20.0 * math.log10(value)) if value > 0 else floor


# ---------------------------------------------------------------------- WAV
def wav_header(rate: int, frames: int | None = None) -> bytes:
    """The 44-byte header of a 16-bit mono PCM WAV of ``frames`` samples at ``rate`` Hz.

    ``frames`` None leaves the sizes open (0xFFFFFFFF), for a file streamed before its
    length is known; readers that stream (and soundfile) take the data to the end.
    """
    if rate <= 0:
        raise ValueError(f"a WAV file's rate must be positive; got {rate}")
    data = _OPEN_SIZE if frames is None else 2 * frames
    riff = _OPEN_SIZE if frames is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16)
            + b"data" + struct.pack("<I", data))


def wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    """float mono ``audio`` at ``rate`` Hz as a whole 16-bit PCM WAV file, in memory."""
    pcm = to_int16(np.asarray(audio).reshape(-1))
    return wav_header(rate, pcm.size) + pcm.tobytes()
