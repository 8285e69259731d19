"""``parley --self-test``: a fresh interpreter runs one real turn of the bundled recording
through the bundled models and reports JSON on stdout; failures say why and exit non-zero.

The real run loads every offline model (~10 s here once the SmolLM2 GGUF is converted in
the shared test cache), so it runs once per module and the tests read its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.selftest import normalize_words

ROOT = Path(__file__).resolve().parents[2]


def _self_test(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("QT_QPA_PLATFORM", None)  # the self-test must not need a display or Qt at all
    return subprocess.run([sys.executable, "-m", "app", "--self-test", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def report() -> dict:
    proc = _self_test()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)  # stdout holds the JSON document and nothing else
    data["_stderr"] = proc.stderr
    return data


@pytest.mark.slow
def test_self_test_hears_one_two_three_and_answers(report):
    assert report["ok"] is True and "error" not in report
    assert "one two three" in normalize_words(report["transcript"])
    assert report["reply"].strip()
    assert report["reply_audio"]["seconds"] > 0.3 and report["reply_audio"]["rms"] > 1e-3
    assert report["errors"] == [] and report["turns"] >= 1
    assert report["recording"].endswith("resources/audio/one_two_three_44k.wav")


@pytest.mark.slow
def test_self_test_reports_real_placements_and_timings(report):
    placed = {p["stage"]: p for p in report["placements"]}
    assert set(placed) == {"vad", "stt", "llm", "tts"}
    assert all(p["device"] == "cpu" and p["actual_device"] == "cpu" for p in placed.values())
    assert all(p["bundled"] for p in placed.values())  # offline: the bundled stack
    timeline = report["timeline"]
    order = [timeline[m] for m in ("speech_end", "stt_done", "llm_first_token", "tts_first_audio")]
    assert order == sorted(order)
    first = report["launch_to_first_reply_audio_s"]
    assert 0 < report["launch_to_ready_s"] < first <= report["total_s"]
    assert report["load_s"] > 0 and report["frozen"] is False
    assert "[self-test llm" in report["_stderr"]  # progress went to stderr, not stdout


def test_a_missing_config_file_fails_with_json_naming_it(tmp_path):
    missing = tmp_path / "nope.toml"
    proc = _self_test("--config", str(missing), timeout=120)
    data = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert data["ok"] is False and data["error_type"] == "ConfigError"
    assert str(missing) in data["error"]


def test_an_impossible_device_fails_before_loading_models(tmp_path):
    config = tmp_path / "parley.toml"
    config.write_text('device = "cuda:7"\n', encoding="utf-8")
    proc = _self_test("--config", str(config), timeout=120)
    data = json.loads(proc.stdout)
    assert proc.returncode != 0 and data["ok"] is False
    assert "cuda:7" in data["error"]
    assert "placements" not in data  # nothing loaded


def test_normalize_words_spells_out_digits():
    assert normalize_words("1, 2, 3.") == "one two three"
    assert normalize_words("One, two, three!") == "one two three"
    assert normalize_words("") == ""
