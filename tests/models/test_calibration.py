"""The calibration: predictions per rung from real-width kernels, cached per machine and version.

Timings are never asserted (speed goes in ``parley-cli bench calibration``); these tests
check which rungs get which figures, the cache's keys and the errors.
"""

from __future__ import annotations

import json

import pytest

from engine.errors import ConfigError
from engine.models import calibration as cal
from engine.backends.ladder import Ladder, load_ladder

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")

RUNGS = ("whisper-tiny.en", "smollm2-360m-instruct", "piper-lessac-low", "piper-lessac-medium",
         "kokoro-82m")


@pytest.fixture(scope="module")
def ladder() -> Ladder:
    full = load_ladder()
    return Ladder(full.path, tuple(r for r in full.rungs if r.id in RUNGS))


@pytest.fixture(scope="module")
def measured(ladder, tmp_path_factory):
    """One calibration of the small ladder, two layers per stack, into its own cache."""
    pytest.importorskip("piper")
    folder = tmp_path_factory.mktemp("calibration")
    return cal.calibrate("cpu", ladder=ladder, cache_dir=folder, layers=2), folder


def test_each_rung_gets_the_figures_of_its_stage(measured):
    calibration, _folder = measured
    assert list(calibration.costs) == list(RUNGS)
    stt, llm = calibration.costs["whisper-tiny.en"], calibration.costs["smollm2-360m-instruct"]
    assert stt.stt_s > 0 and stt.stt_30s_s > 0
    assert (stt.llm_first_token_s, stt.llm_tokens_per_s, stt.tts_first_chunk_s,
            stt.llm_turn_first_token_s) == (None, None, None, None)
    # Both first tokens: a later turn's (new tokens on the kept cache) and the first turn's.
    assert llm.llm_first_token_s > 0 and llm.llm_tokens_per_s > 0 and llm.llm_turn_first_token_s > 0
    assert (llm.stt_s, llm.stt_30s_s, llm.tts_first_chunk_s) == (None, None, None)
    assert calibration.costs["piper-lessac-medium"].tts_first_chunk_s > 0
    # No cost model for Kokoro yet: every figure is None, never a guess.
    kokoro = calibration.costs["kokoro-82m"]
    assert (kokoro.stt_s, kokoro.llm_first_token_s, kokoro.tts_first_chunk_s) == (None, None, None)
    assert all(c.device_kind == "cpu" for c in calibration.costs.values())


def test_piper_low_is_the_medium_voice_at_16_khz(measured):
    # Same parameter count in the ladder; the low tier speaks at 16 kHz, medium at 22.05 kHz.
    costs = measured[0].costs
    ratio = costs["piper-lessac-low"].tts_first_chunk_s / costs["piper-lessac-medium"].tts_first_chunk_s
    assert ratio == pytest.approx(16000 / 22050)


def test_the_machine_is_named_in_the_fingerprint(measured):
    calibration = measured[0]
    assert calibration.machine == cal.machine_fingerprint("cpu")
    assert "cores" in calibration.machine and calibration.machine.endswith("; cpu")
    assert calibration.parley_version == cal.parley_version() and calibration.took_s > 0
    assert calibration.load is not None and calibration.load >= 0  # Linux has a load average


def test_the_cache_is_hit_for_the_same_machine_and_version(measured):
    calibration, folder = measured
    assert cal.cached_calibration("cpu", cache_dir=folder, layers=2) == calibration
    assert cal.cached_calibration("cpu", cache_dir=folder) is None  # full size: another entry
    assert cal.cached_calibration("cuda", cache_dir=folder, layers=2) is None


def test_the_cache_misses_on_another_machine_or_version(measured, monkeypatch):
    _calibration, folder = measured
    path = cal.cache_file("cpu", cache_dir=folder, layers=2)
    monkeypatch.setattr(cal, "parley_version", lambda: "99.0")
    assert cal.cached_calibration("cpu", cache_dir=folder, layers=2) is None
    monkeypatch.undo()
    monkeypatch.setattr(cal, "machine_fingerprint", lambda kind: f"another CPU; 64 cores; {kind}")
    assert cal.cached_calibration("cpu", cache_dir=folder, layers=2) is None
    monkeypatch.undo()
    # A file copied from another machine under this machine's name is not trusted either.
    data = json.loads(path.read_text(encoding="utf-8"))
    other = folder / "other"
    copy = cal.cache_file("cpu", cache_dir=other, layers=2)
    copy.parent.mkdir(parents=True)
    copy.write_text(json.dumps({**data, "machine": "another CPU"}), encoding="utf-8")
    assert cal.cached_calibration("cpu", cache_dir=other, layers=2) is None


def test_an_unreadable_cache_is_a_miss_with_a_warning(tmp_path, caplog):
    path = cal.cache_file("cpu", cache_dir=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    assert cal.cached_calibration("cpu", cache_dir=tmp_path) is None
    assert "unreadable calibration" in caplog.text and str(path) in caplog.text


def test_nothing_cached_is_none(tmp_path):
    assert cal.cached_calibration("cpu", cache_dir=tmp_path) is None


def test_a_calibration_not_stored_leaves_the_cache_alone(ladder, tmp_path):
    # bench calibration measures part of the ladder: it must not replace auto's calibration.
    part = Ladder(ladder.path, tuple(r for r in ladder.rungs if r.id == "whisper-tiny.en"))
    calibration = cal.calibrate("cpu", ladder=part, cache_dir=tmp_path, layers=1, store=False)
    assert list(calibration.costs) == ["whisper-tiny.en"]
    assert cal.cached_calibration("cpu", cache_dir=tmp_path, layers=1) is None


@pytest.mark.parametrize(("kind", "layers", "fragment"), [
    ("tpu", None, "device kind 'tpu' is not one of cpu, cuda, mps, mlx"),
    ("cpu", 0, "layers must be at least 1, got 0"),
])
def test_bad_requests_are_refused_before_measuring(tmp_path, kind, layers, fragment):
    with pytest.raises(ConfigError, match=fragment):
        cal.calibrate(kind, cache_dir=tmp_path, layers=layers)


def test_the_table_has_a_row_per_rung_and_the_time_taken(measured):
    text = cal.format_calibration(measured[0])
    assert "took" in text
    for rung in RUNGS:
        assert any(line.startswith(rung) for line in text.splitlines())
    kokoro = next(line for line in text.splitlines() if line.startswith("kokoro-82m"))
    assert kokoro.split()[1:] == ["-"] * 6


def test_a_calibration_begun_on_a_busy_machine_says_its_figures_are_inflated(monkeypatch):
    from engine.runtime import compute_gate

    monkeypatch.setattr(compute_gate, "cpu_cores", lambda: 2)
    quiet = cal.Calibration("m", "v", "cpu", 10.0, {}, load=0.4)
    busy = cal.Calibration("m", "v", "cpu", 80.0, {}, load=9.5)
    assert not quiet.busy and busy.busy and not cal.Calibration("m", "v", "cpu", 1.0).busy
    assert "WARNING" not in cal.format_calibration(quiet)
    assert ("WARNING: the machine was busy as it began (load average 9.5): every figure is "
            "inflated") in cal.format_calibration(busy)


def test_the_kernel_whisper_has_the_config_width(tmp_path):
    import ctranslate2

    from engine.models.kernels import write_ct2_whisper

    path = load_ladder().get("whisper-large-v3-turbo").hub_config
    assert path is not None
    config = json.loads(path.read_text())
    folder = write_ct2_whisper(tmp_path / "w", config, encoder_layers=1, decoder_layers=1)
    model = ctranslate2.models.Whisper(str(folder), compute_type="int8")
    # Written without language tokens: its cost is that of a model told the language.
    assert model.n_mels == 128 and not model.is_multilingual
    assert json.loads((folder / "preprocessor_config.json").read_text())["feature_size"] == 128


def test_parley_cli_calibrate_shows_the_cached_table(tmp_path, monkeypatch, capsys):
    from engine.cli.main import main

    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path))
    costs = {"whisper-tiny.en": cal.RungCost("whisper-tiny.en", "cpu", stt_s=0.083, stt_30s_s=0.26)}
    stored = cal.Calibration(cal.machine_fingerprint("cpu"), cal.parley_version(), "cpu", 12.5, costs)
    cal._store(stored, cal.cache_file("cpu"))
    assert main(["calibrate"]) == 0
    out, err = capsys.readouterr()
    assert "cached calibration" in err and "took 12.5 s" in out
    row = next(line for line in out.splitlines() if line.startswith("whisper-tiny.en"))
    assert row.split()[1:5] == ["83", "ms", "260", "ms"]
    assert main(["calibrate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["costs"]["whisper-tiny.en"]["stt_30s_s"] == 0.26 and data["took_s"] == 12.5
