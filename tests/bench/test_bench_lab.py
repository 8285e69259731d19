"""``parley-cli bench --layouts``: layout parsing, every bad input failing before anything
loads, the table, the plot, and one real run of two layouts on the offline stack."""

from __future__ import annotations

import json

import pytest

from engine.bench.lab import format_layouts
from engine.bench.layouts import Layout, parse_layouts
from engine.cli.main import main
from engine.config import EngineConfig
from engine.errors import ConfigError, DeviceError
from engine.measures import Figure
from engine.pipeline.critical_path import Segment
from engine.report import BENCH_FIGURES
from tests.support.cli import run_cli
from tests.support.paths import ROOT

AUDIO = str(ROOT / "resources" / "audio" / "one_two_three_44k.wav")


# -- layouts ---------------------------------------------------------------------------

def test_spec_list_parses_into_layouts():
    layouts = parse_layouts("all=cpu; stt=mlx,llm=mlx ;stt=cpu,llm=cuda:0,tts=cuda:1")
    assert layouts == [
        Layout("all=cpu", {"device": "cpu"}),
        Layout("stt=mlx,llm=mlx", {"stt.device": "mlx", "llm.device": "mlx"}),
        Layout("stt=cpu,llm=cuda:0,tts=cuda:1",
               {"stt.device": "cpu", "llm.device": "cuda:0", "tts.device": "cuda:1"}),
    ]


def test_dotted_keys_are_settings_and_apply_to_the_config():
    (layout,) = parse_layouts("all=cpu,turns.speculative=true")
    assert layout.overrides == {"device": "cpu", "turns.speculative": "true"}
    config = EngineConfig().with_overrides(layout.overrides)
    assert config.device == "cpu" and config.turns.speculative is True


def test_toml_file_names_its_layouts(tmp_path):
    path = tmp_path / "layouts.toml"
    path.write_text('[layouts.cpu]\nall = "cpu"\n\n[layouts.split]\nstt = "mlx"\nllm = "cpu"\n'
                    'turns.speculative = true\n', encoding="utf-8")
    assert parse_layouts(str(path)) == [
        Layout("cpu", {"device": "cpu"}),
        Layout("split", {"stt.device": "mlx", "llm.device": "cpu", "turns.speculative": "true"}),
    ]


@pytest.mark.parametrize("spec, error, fragment", [
    ("stt=cpu,stt=mlx", ConfigError, "sets 'stt' twice"),
    ("all=cpu,all=mlx", ConfigError, "sets 'all' twice"),
    ("gpu=cpu", ConfigError, "unknown stage 'gpu'"),
    ("stt=tpu", DeviceError, "is not a device"),
    ("all=cuda:x", DeviceError, "is not a device"),
    ("stt", ConfigError, "expected STAGE=DEVICE"),
    ("stt=", ConfigError, "expected STAGE=DEVICE"),
    ("all=cpu;;all=mlx", ConfigError, "an empty layout"),
    ("all=cpu;", ConfigError, "an empty layout"),
    ("all=cpu;all=cpu", ConfigError, "given twice"),
])
def test_bad_specs_are_refused(spec, error, fragment):
    with pytest.raises(error, match=fragment):
        parse_layouts(spec)


@pytest.mark.parametrize("text, fragment", [
    ("not toml [", "not valid TOML"), ("[other]\nx = 1\n", "must hold only"),
    ("[layouts]\n", "must hold only"), ('[layouts.a]\nstt = "cpu"\nstt.device = "mlx"\n',
                                                   "not valid TOML"),
    ('[layouts.a]\nvoice = "cpu"\n', "unknown stage 'voice'"),
])
def test_bad_toml_files_are_refused(tmp_path, text, fragment):
    path = tmp_path / "layouts.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=fragment):
        parse_layouts(str(path))


# -- bad input: exit 2 before any model loads -------------------------------------------

@pytest.fixture
def no_loading(monkeypatch):
    """Any model load fails the test: the errors must come first."""
    from engine.engine import Engine

    def refuse(*_a, **_k):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(Engine, "load", refuse)
    monkeypatch.setattr(Engine, "__init__", refuse)


@pytest.mark.parametrize("args, fragment", [
    (["--layouts", "all=cpu;stt=cuda:7", AUDIO],
     "layout 'stt=cuda:7': stt stage: device 'cuda:7' is not available"),
    (["--layouts", "all=cpu;stt=tpu", AUDIO], "is not a device"),
    (["--layouts", "stt=cpu,stt=cpu", AUDIO], "twice"),
    (["--layouts", "brain=cpu", AUDIO], "unknown stage 'brain'"),
    (["--layouts", "all=cpu"], "no INPUT recording given"),
    (["--layouts", "all=cpu", AUDIO, "/no/such/file.wav"], "no such file: /no/such/file.wav"),
    (["--layouts", "all=cpu", AUDIO, "--runs", "0"], "--runs must be at least 1"),
    (["--layouts", "all=cpu", AUDIO, "--units", "0"], "units"),
    (["--layouts", "all=cpu", AUDIO, "--units", "2"], "several pipeline units"),
    (["--layouts", "all=cpu", AUDIO, "--plot", "out.svg"], "name a .png file"),
    (["--layouts", "/no/such/layouts.toml", AUDIO], "no such file: /no/such/layouts.toml"),
    (["--layouts=all=cpu;all=remote", AUDIO], "'device' = remote"),
    (["--layouts", "all=cpu", AUDIO, "--random-layers", "2"], "needs --weights random"),
    (["--layouts", "all=cpu", AUDIO, "--weights", "random", "--random-layers", "0"],
     "needs --weights random and N of at least 1"),
    (["--layouts", "all=cpu;stt=mlx", AUDIO, "--weights", "random"],
     "layout 'stt=mlx': stt stage: backend 'transformers-whisper' cannot run on mlx"),
])
def test_bad_input_fails_before_anything_loads(no_loading, capsys, args, fragment):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert "parley-cli: error:" in err and fragment in err, err
    assert "Traceback" not in err


def test_unreadable_input_file_is_refused(no_loading, capsys, tmp_path):
    bogus = tmp_path / "noise.wav"
    bogus.write_bytes(b"not audio at all")
    assert main(["bench", "--layouts", "all=cpu", AUDIO, str(bogus)]) == 2
    assert str(bogus) in capsys.readouterr().err


def test_missing_matplotlib_names_the_extra(no_loading, capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # import fails
    assert main(["bench", "--layouts", "all=cpu", AUDIO, "--plot", str(tmp_path / "x.png")]) == 2
    assert "pip install 'parley[lab]'" in capsys.readouterr().err


def test_plain_bench_is_unchanged():
    from engine.cli.main import build_parser

    args = build_parser().parse_args(["bench", AUDIO, "--runs", "2"])
    assert (args.command, args.input, args.runs) == ("bench", AUDIO, 2)


# -- the report, from a made-up document -------------------------------------------------

def _summary(v2v: float) -> dict:
    out = {}
    for figure in BENCH_FIGURES:
        value = v2v if figure is Figure.VOICE_TO_VOICE_S else v2v / 5
        out[figure.value] = {"n": 2, "p50": value, "p95": value * 1.2, "min": value * 0.9,
                             "max": value * 1.2}
    return out


def _turn(v2v: float) -> dict:
    """A turn dict as the bench records it, its reply held 0.125 s for the commit."""
    path = {s.value: 0.0 for s in Segment}
    path.update({"silence_wait_s": 0.25, "stt_s": 0.125, "commit_wait_s": 0.125})
    path["to_speaker_s"] = v2v - sum(path.values())
    return {"voice_to_voice_s": v2v, "cancelled": False, "critical_path": path}


def _doc() -> dict:
    rows = [{"layout": label, "settings": {}, "placements": [], "load_s": 1.5, "models_loaded": 4,
             "load_memory_bytes": {"cpu": 2**29},
             "summary": _summary(v2v), "lock_wait_s": {"llm model": 0.002},
             "memory_peak": {"cpu": {"used_bytes": 2**30}},
             "vs_first": {"ratio": v2v / 0.8, "min": v2v / 0.8 - 0.05, "max": v2v / 0.8 + 0.05},
             "turns": [[_turn(v2v)], [_turn(v2v + 0.25)]]}
            for label, v2v in (("all=cpu", 0.8), ("stt=mlx,llm=cpu", 0.6))]
    return {"inputs": [AUDIO], "runs": 2, "baseline": "all=cpu", "note": "n", "layouts": rows}


def test_table_puts_layouts_side_by_side():
    text = format_layouts(_doc())
    assert "all=cpu" in text.splitlines()[0] and "stt=mlx,llm=cpu" in text.splitlines()[0]
    assert "1.5 s (4)" in text and "800.0 ms" in text and "600.0 ms" in text
    assert "0.75 (0.70-0.80)" in text
    assert "llm model lock wait" in text and "1.00 GiB" in text
    # The budget of each layout's median turn (the faster of its two), in one table.
    budget = {line[:40].strip(): line[40:].split() for line in text.splitlines()}
    assert budget["wait for the turn to commit"] == ["125.0", "125.0"]
    assert budget["= voice-to-voice"] == ["800.0", "600.0"]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from engine.bench.plot import plot_layouts

    path = tmp_path / "layouts.png"
    plot_layouts(_doc(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


# -- random weights ---------------------------------------------------------------------

def test_hub_configs_hold_the_real_sizes():
    from engine.bench.random_weights import LLM, WHISPER, hub_config

    whisper = hub_config(WHISPER)
    assert (whisper["d_model"], whisper["encoder_layers"], whisper["decoder_layers"]) == (1280, 32, 4)
    assert (whisper["encoder_attention_heads"], whisper["decoder_attention_heads"]) == (20, 20)
    assert (whisper["num_mel_bins"], whisper["vocab_size"], whisper["encoder_ffn_dim"]) == (128, 51866, 5120)
    llm = hub_config(LLM)
    assert (llm["hidden_size"], llm["num_hidden_layers"], llm["num_attention_heads"],
            llm["num_key_value_heads"], llm["intermediate_size"], llm["vocab_size"]) == (
        960, 32, 15, 5, 2560, 49152)


@pytest.mark.slow
def test_random_models_load_with_the_real_widths(tmp_path):
    from transformers import (AutoModelForCausalLM, AutoProcessor, AutoTokenizer,
                              WhisperForConditionalGeneration)

    from engine.bench.random_weights import random_overrides

    overrides = random_overrides(layers=1, root=tmp_path)
    assert overrides["stt.backend"] == "transformers-whisper" and overrides["llm.backend"] == "transformers"
    whisper = WhisperForConditionalGeneration.from_pretrained(overrides["stt.model"])
    config = whisper.config
    assert (config.d_model, config.num_mel_bins, config.vocab_size) == (1280, 128, 51866)
    assert (whisper.config.encoder_layers, whisper.config.decoder_layers) == (1, 1)
    processor = AutoProcessor.from_pretrained(overrides["stt.model"])
    assert processor.feature_extractor.feature_size == 128
    llm = AutoModelForCausalLM.from_pretrained(overrides["llm.model"])
    assert (llm.config.hidden_size, llm.config.num_hidden_layers) == (960, 1)
    assert AutoTokenizer.from_pretrained(overrides["llm.model"]).chat_template
    assert random_overrides(layers=1, root=tmp_path) == overrides  # built once, reused


# -- the real thing --------------------------------------------------------------------

@pytest.mark.slow
def test_two_layouts_on_the_offline_stack(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "layouts.png"
    result = run_cli("bench", "--layouts", "all=cpu;all=cpu,turns.speculative=true", AUDIO,
                     "--runs", "1", "--json", "--plot", str(plot), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    assert doc["runs"] == 1 and doc["inputs"] == [AUDIO] and doc["baseline"] == "all=cpu"
    labels = [row["layout"] for row in doc["layouts"]]
    assert labels == ["all=cpu", "all=cpu,turns.speculative=true"]
    for row in doc["layouts"]:
        assert {p["stage"] for p in row["placements"]} == {"vad", "stt", "llm", "tts"}
        assert all(p["device"] == "cpu" for p in row["placements"])
        assert row["load_s"] >= 0 and len(row["turns"]) == 1 and row["turns"][0]
        assert row["summary"]["voice_to_voice_s"]["n"] >= 1
        assert row["memory_peak"]["cpu"]["used_bytes"] > 100 * 2**20
        assert all(v >= 0 for v in row["lock_wait_s"].values())
    assert [row["models_loaded"] for row in doc["layouts"]] == [4, 0]  # one registry
    assert doc["layouts"][0]["vs_first"] == {"ratio": 1.0, "min": 1.0, "max": 1.0}
    assert doc["layouts"][1]["vs_first"]["ratio"] > 0
    assert plot.stat().st_size > 10_000
