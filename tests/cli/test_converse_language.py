"""``parley-cli converse --language``: a French recording's turn reported in French with
its probability (``--json``), and ``auto`` on the English-only bundled Whisper refused."""

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from tests.support.cli import run_cli

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                 reason="espeak-ng speaks the recording: apt install espeak-ng")]


@pytest.fixture(scope="module")
def french_wav(tmp_path_factory) -> str:
    from engine.bench.language import espeak_speech

    silence = np.zeros(16000, np.float32)
    speech = espeak_speech("fr", "Je voudrais un café, s'il vous plaît.")
    path = tmp_path_factory.mktemp("french") / "cafe.wav"
    sf.write(path, np.concatenate([silence, speech, silence, silence]), 16000)
    return str(path)


def test_converse_json_gives_each_turn_its_detected_language(french_wav, whisper_base_multilingual):
    result = run_cli("converse", french_wav, "--fast", "--json", "--language", "auto",
                     "--stt-backend", "faster-whisper", "--stt-model", whisper_base_multilingual)
    assert result.returncode == 0, result.stderr
    turns = json.loads(result.stdout)["turns"]
    assert turns and turns[0]["language"] == "fr", turns
    assert "café" in turns[0]["transcript"].lower()
    assert 0.5 < turns[0]["stt_language_p"] <= 1.0


def test_auto_with_the_english_only_whisper_is_a_clear_error(french_wav):
    result = run_cli("converse", french_wav, "--fast", "--language", "auto")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "'stt.language' = 'auto'" in result.stderr and "English-only" in result.stderr
    assert "multilingual Whisper" in result.stderr
