"""parley-cli as a user runs it: real models, real recordings, clear errors."""

import json

import numpy as np
import pytest
import soundfile as sf

from tests.support.cli import run_cli
from tests.support.transcripts import normalize


@pytest.mark.slow
def test_converse_jfk_json_transcribes_answers_and_speaks(tmp_path, jfk_path, stt_model):
    reply = tmp_path / "reply.wav"
    result = run_cli("converse", str(jfk_path), "--output", str(reply), "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)  # stdout is clean JSON; progress went to stderr
    heard = " ".join(normalize(t["transcript"]) for t in data["turns"])
    assert "ask not what your country can do for you" in heard
    assert all(t["reply"].strip() for t in data["turns"])
    for turn in data["turns"]:
        timeline = turn["timeline"]
        for mark in ("speech_end", "stt_done", "llm_first_token", "tts_first_text",
                     "tts_first_audio", "audio_out_first"):
            assert mark in timeline, mark
        assert turn["voice_to_voice_s"] > 0
    assert {p["stage"]: p["actual_device"] for p in data["placements"]} == {
        "vad": "cpu", "stt": "cpu", "llm": "cpu", "tts": "cpu"}
    audio, rate = sf.read(reply, dtype="float32")
    assert audio.size / rate > 1.0
    from engine.audio.decode import resample

    words = normalize(stt_model.transcribe(resample(audio, rate, 16000), "en").text).split()
    assert len(words) >= 3, words


def _write(path, audio, rate=16000):
    sf.write(path, audio, rate)
    return str(path)


@pytest.mark.parametrize("case", ["missing", "not_audio", "empty", "directory"])
def test_bad_input_files_get_a_clear_error(tmp_path, case):
    path = tmp_path / "input.wav"
    if case == "not_audio":
        path.write_text("this is not a recording\n")
    elif case == "empty":
        _write(path, np.zeros(0, np.float32))
    elif case == "directory":
        path = tmp_path
    result = run_cli("converse", str(path))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "parley-cli: error:" in result.stderr and str(path) in result.stderr


@pytest.mark.slow
def test_silence_only_says_no_turn(tmp_path):
    path = _write(tmp_path / "silence.wav", np.zeros(3 * 16000, np.float32))
    result = run_cli("converse", path, "--fast")
    assert result.returncode == 3
    assert "no speech found" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("flags, fragments", [
    (["--llm-device", "cuda:3"], ["llm stage", "cuda:3", "devices present: cpu"]),
    (["--tts-backend", "espeak"], ["'tts.backend' = 'espeak'", "piper", "kokoro"]),
    (["--stt-device", "gpu"], ["'stt.device' = 'gpu' is not a device"]),
    (["--vad-threshold", "2"], ["'vad.threshold' must be between"]),
    (["--units", "2"], ["'units' = 2", "realtime mode", "parley-cli serve --num-pipelines 2"]),
])
def test_bad_settings_fail_before_any_model_loads(jfk_path, flags, fragments):
    result = run_cli("converse", str(jfk_path), *flags)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert "loading" not in result.stderr  # nothing was loaded


def test_malformed_config_names_the_key(tmp_path, jfk_path):
    config = tmp_path / "parley.toml"
    config.write_text("[llm]\nmax_new_token = 20\n")
    result = run_cli("converse", str(jfk_path), "--config", str(config))
    assert result.returncode == 2
    assert "unknown key 'llm.max_new_token'" in result.stderr and "max_new_tokens" in result.stderr


@pytest.mark.parametrize("flags", [["--stt-device", "mlx"], ["--stt-backend", "mlx-whisper"]])
def test_missing_optional_package_gives_the_pip_command(tmp_path, jfk_path, flags):
    # Hide MLX from this interpreter as if the [mlx] extra were not installed.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('mlx', 'mlx_whisper', 'mlx_lm'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n")
    result = run_cli("converse", str(jfk_path), *flags, env={"PYTHONPATH": str(hide)})
    assert result.returncode == 2, result.stderr
    assert "pip install 'parley[mlx]'" in result.stderr and "Traceback" not in result.stderr


def test_devices_lists_cpu_and_why_others_are_missing():
    result = run_cli("devices", "--json")
    assert result.returncode == 0, result.stderr
    devices = {d["device"]: d for d in json.loads(result.stdout)["devices"]}
    assert devices["cpu"]["available"]
    assert not devices["mps"]["available"] and devices["mps"]["reason"]
    # mlx[cpu] is installed here: the MLX device shows its memory counters.
    assert devices["mlx"]["available"]
    assert {"used_bytes", "peak", "cache"} <= set(devices["mlx"]["memory"])
