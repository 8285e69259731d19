"""Audio decoding and the Silero VAD backend, on real speech (jfk.flac) and real silence."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from engine.audio.decode import load_audio, resample
from engine.backends.base import LoadRequest, no_progress
from engine.config import VadConfig
from engine.runtime.devices import CPU, Device
from engine.errors import AudioInputError, DeviceError
from tests.support.paths import ROOT

FRAME = 512
FRAME_S = FRAME / 16000

# Speech stretches of jfk.flac measured with this backend (frames at or above 0.5, gaps
# under 0.3 s merged, blips under 0.1 s dropped). The starts match silero-vad's own
# get_speech_timestamps to the frame; its ends are up to 40 ms later (hysteresis).
JFK_STRETCHES = [(0.35, 2.24), (3.30, 4.38), (5.41, 7.62), (8.19, 10.59)]

# Probabilities of jfk.flac frames computed by silero-vad's own OnnxWrapper: the frames
# where dropping the 64-sample context changes the answer most (by 0.16 to 0.35).
JFK_REFERENCE = {119: 0.4193, 238: 0.3937, 239: 0.1922, 328: 0.5478, 329: 0.2757, 331: 0.1457}


# ----------------------------------------------------------------------- decoding
def test_jfk_decodes_to_11_seconds_of_16k_mono(jfk_path):
    audio = load_audio(jfk_path)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size == pytest.approx(11.0 * 16000, abs=16)
    assert 0.01 < float(np.sqrt(np.mean(audio**2))) < 0.5  # real signal, not clipped noise
    assert np.abs(audio).max() <= 1.0


def test_stereo_is_down_mixed_and_any_rate_resampled(tmp_path):
    t = np.arange(22050) / 22050
    left = 0.5 * np.sin(2 * np.pi * 440 * t)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, np.zeros_like(left)], axis=1), 22050, subtype="PCM_16")
    audio = load_audio(path, target_rate=8000)
    assert audio.dtype == np.float32 and audio.shape == (8000,)
    spectrum = np.abs(np.fft.rfft(audio))
    assert np.argmax(spectrum) == pytest.approx(440, abs=2)  # 1 s at 8 kHz: 1 Hz bins
    assert np.abs(audio[1000:-1000]).max() == pytest.approx(0.25, abs=0.01)  # mean of L, R


def test_resample_keeps_duration_and_returns_float32():
    out = resample(np.zeros(44100, dtype=np.float64), 44100, 16000)
    assert out.dtype == np.float32 and out.shape == (16000,)
    same = resample(np.ones(10, dtype=np.float32), 16000, 16000)
    assert same.dtype == np.float32 and same.shape == (10,)
    with pytest.raises(AudioInputError, match="positive"):
        resample(np.zeros(10, dtype=np.float32), 0, 16000)


def test_missing_file_is_named(tmp_path):
    path = tmp_path / "nope.wav"
    with pytest.raises(AudioInputError, match=f"no such file: {path}"):
        load_audio(path)


def test_directory_is_refused(tmp_path):
    with pytest.raises(AudioInputError, match="is a directory"):
        load_audio(tmp_path)


def test_text_file_is_not_audio(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio")
    with pytest.raises(AudioInputError,
                       match=r"is not an audio file soundfile can read \(wav, flac, mp3, ogg\)"):
        load_audio(path)


def test_empty_audio_is_refused(tmp_path):
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros((0, 1), dtype=np.float32), 16000)
    with pytest.raises(AudioInputError, match="holds no audio samples"):
        load_audio(path)


# ----------------------------------------------------------------------- Silero VAD
@pytest.fixture(scope="module")
def vad():
    from engine.backends.vad import silero

    return silero.load(LoadRequest("bundled", CPU, "auto", VadConfig()), no_progress)


@pytest.fixture(scope="module")
def jfk16k(jfk_path):
    return load_audio(jfk_path)


def _probabilities(stream, audio: np.ndarray) -> np.ndarray:
    n = audio.size // FRAME
    return np.array([stream.speech_probability(audio[i * FRAME:(i + 1) * FRAME])
                     for i in range(n)])


def speech_stretches(probs: np.ndarray, threshold: float = 0.5, merge_gap_s: float = 0.3,
                     min_run_s: float = 0.1) -> list[tuple[float, float]]:
    """(start, end) seconds of runs at or above ``threshold``, merging gaps under
    ``merge_gap_s`` and dropping runs shorter than ``min_run_s``."""
    runs: list[list[float]] = []
    start = None
    for i, p in enumerate([*probs, 0.0]):
        if p >= threshold and start is None:
            start = i
        elif p < threshold and start is not None:
            if runs and (start - runs[-1][1]) * FRAME_S < merge_gap_s:
                runs[-1][1] = i
            else:
                runs.append([start, i])
            start = None
    return [(s * FRAME_S, e * FRAME_S) for s, e in runs if (e - s) * FRAME_S >= min_run_s]


def test_model_is_the_shipped_onnx_on_cpu(vad):
    assert vad.path.name == "silero_vad.onnx" and vad.path.parent.name == "data"
    assert vad.frame_samples == 512 and vad.sample_rate == 16000
    assert vad.actual_device == "cpu"
    assert vad._session.get_providers()[0] == "CPUExecutionProvider"
    assert vad._session.get_session_options().intra_op_num_threads == 1


def test_jfk_speech_stretches_and_pauses(vad, jfk16k):
    probs = _probabilities(vad.new_stream(), jfk16k)
    stretches = speech_stretches(probs)
    assert len(stretches) == len(JFK_STRETCHES), stretches
    for (start, end), (want_start, want_end) in zip(stretches, JFK_STRETCHES):
        assert start == pytest.approx(want_start, abs=0.1)
        assert end == pytest.approx(want_end, abs=0.1)
    t = np.arange(probs.size) * FRAME_S
    assert np.median(probs[(t > 0.6) & (t < 2.0)]) > 0.9  # "And so my fellow Americans"
    assert probs[(t > 2.4) & (t < 3.15)].max() < 0.2  # the first pause


def test_probabilities_match_silero_vads_own_wrapper(vad, jfk16k):
    probs = _probabilities(vad.new_stream(), jfk16k)
    for frame, want in JFK_REFERENCE.items():
        assert probs[frame] == pytest.approx(want, abs=0.01), frame


def test_silence_is_not_speech(vad):
    stream = vad.new_stream()
    probs = [stream.speech_probability(np.zeros(FRAME, dtype=np.float32)) for _ in range(50)]
    assert max(probs) < 0.1


def test_streams_are_independent(vad, jfk16k):
    speech = jfk16k[: 3 * 16000]
    alone = _probabilities(vad.new_stream(), speech)
    a, b = vad.new_stream(), vad.new_stream()
    mixed_a, mixed_b = [], []
    for i in range(alone.size):
        mixed_a.append(a.speech_probability(speech[i * FRAME:(i + 1) * FRAME]))
        mixed_b.append(b.speech_probability(np.zeros(FRAME, dtype=np.float32)))
    np.testing.assert_allclose(mixed_a, alone, atol=1e-6)
    assert max(mixed_b) < 0.1


def test_reset_forgets_the_stream(vad, jfk16k):
    stream = vad.new_stream()
    first = _probabilities(stream, jfk16k[:16000])
    stream.reset()
    np.testing.assert_allclose(_probabilities(stream, jfk16k[:16000]), first, atol=1e-6)


def test_wrong_frame_size_is_refused(vad):
    with pytest.raises(AudioInputError, match="frames of 512 samples"):
        vad.new_stream().speech_probability(np.zeros(480, dtype=np.float32))


def test_unsupported_devices_are_refused():
    from engine.backends.vad import silero

    with pytest.raises(DeviceError, match="mps"):
        silero.load(LoadRequest("bundled", Device("mps"), "auto", VadConfig()), no_progress)
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(DeviceError, match="no CUDA provider"):
            silero.load(LoadRequest("bundled", Device("cuda", 0), "auto", VadConfig()),
                        no_progress)


def test_loading_does_not_import_torch():
    # Importing the silero_vad package imports torch and sets its thread count to 1.
    code = ("import sys; from engine.backends.vad import silero; "
            "from engine.backends.base import LoadRequest, no_progress; "
            "from engine.runtime.devices import CPU; "
            "m = silero.load(LoadRequest('bundled', CPU, 'auto', None), no_progress); "
            "print(m.actual_device, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.split() == ["cpu", "False"]
