"""Read recordings into the pipeline's format: float32 mono at 16 kHz.

soundfile (libsndfile) reads WAV, FLAC, MP3 and OGG at any rate, channel count and bit
depth; soxr resamples at high quality. Every failure is an AudioInputError that names
the file, never a libsndfile traceback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.audio.base import PIPELINE_RATE
from engine.errors import AudioInputError

_FORMATS = "wav, flac, mp3, ogg"


def load_audio(path: str | Path, target_rate: int = PIPELINE_RATE) -> np.ndarray:
    """Decode ``path`` to float32 mono at ``target_rate`` Hz.

    Channels are averaged (down-mixed); the rate is converted with soxr's high-quality
    filter. Raises AudioInputError for a missing path, a directory, a file that is not
    audio soundfile can read, or a file with no samples.
    """
    import soundfile as sf

    path = Path(path)
    if not path.exists():
        raise AudioInputError(f"no such file: {path}")
    if path.is_dir():
        raise AudioInputError(f"{path} is a directory, not an audio file ({_FORMATS})")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except sf.LibsndfileError:
        raise AudioInputError(
            f"{path} is not an audio file soundfile can read ({_FORMATS})"
        ) from None
    except OSError as exc:
        raise AudioInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if data.size == 0:
        raise AudioInputError(f"{path} holds no audio samples")
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    return resample(mono, rate, target_rate)


def resample(audio: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample mono ``audio`` from ``from_rate`` to ``to_rate`` Hz; returns float32.

    Equal rates return the samples unchanged (as float32, contiguous). Rates must be
    positive; anything else is an AudioInputError naming them.
    """
    if from_rate <= 0 or to_rate <= 0:
        raise AudioInputError(
            f"sample rates must be positive; got from_rate={from_rate}, to_rate={to_rate}"
        )
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise AudioInputError(f"resample expects mono (1-D) audio; got shape {audio.shape}")
    if from_rate == to_rate or audio.size == 0:
        return audio
    import soxr

    return np.ascontiguousarray(soxr.resample(audio, from_rate, to_rate, quality="HQ"),
                                dtype=np.float32)
