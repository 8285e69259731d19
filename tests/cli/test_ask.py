"""``parley-cli ask``: a typed message answered on the offline stack (real models), its
reply spoken into a WAV with --output, one JSON record with --json, the turn stored in the
history as typed; and clear errors (exit 2, no traceback, no model loaded) when there is
no message to send."""

import json

import pytest
import soundfile as sf

from engine.history.store import HistoryStore
from engine.pipeline.metrics import TurnKind
from tests.support.cli import run_cli
from tests.support.transcripts import normalize


def _history(data_dir):
    with HistoryStore(data_dir / "history.db") as store:
        return [store.conversation(c.id) for c in reversed(store.conversations())]


@pytest.mark.slow
def test_ask_speaks_into_the_wav_and_reports_one_json_record(tmp_path, stt_model):
    reply_wav = tmp_path / "reply.wav"
    result = run_cli("ask", "What is the capital of France?", "--output", str(reply_wav), "--json",
                     env={"PARLEY_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)  # stdout is the record alone; progress went to stderr
    assert data["message"] == "What is the capital of France?"
    assert "paris" in normalize(data["reply"])
    assert data["kind"] == "typed" and data["errors"] == []
    assert data["audio"] == str(reply_wav) and data["audio_s"] > 1.0
    turn = data["turn"]
    assert turn["reply"] == data["reply"] and not turn["cancelled"]
    assert turn["llm_tokens"] > 0 and turn["llm_first_token_s"] > 0
    for mark in ("llm_start", "llm_first_token", "tts_first_audio", "audio_out_first", "reply_done"):
        assert mark in turn["timeline"], mark
    audio, rate = sf.read(reply_wav, dtype="float32")
    assert abs(audio.size / rate - data["audio_s"]) < 0.05
    from engine.audio.decode import resample

    heard = normalize(stt_model.transcribe(resample(audio, rate, 16000), "en").text)
    assert "paris" in heard or "france" in heard, heard
    (conversation,) = _history(tmp_path)
    (stored,) = conversation.turns
    assert conversation.source == "ask"
    assert stored.kind is TurnKind.TYPED and stored.transcript == data["message"]
    assert stored.reply == data["reply"]


@pytest.mark.slow
def test_ask_dash_reads_stdin_and_without_output_replies_in_text_only(tmp_path):
    result = run_cli("ask", "-", "--no-history", input="What is the capital of France?\n",
                     env={"PARLEY_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "paris" in normalize(lines[0])  # the reply alone on stdout
    assert "spoken into" not in result.stderr
    assert not (tmp_path / "history.db").exists()  # --no-history: nothing stored


@pytest.mark.parametrize("args, stdin, said", [
    (("ask",), "", "ask needs a message"),
    (("ask", ""), "", "ask needs a message"),
    (("ask", "   "), "", "ask needs a message"),
    (("ask", "-"), "", "read no message from stdin (it was empty)"),
    (("ask", "-"), " \n\n", "read no message from stdin (it was empty)"),
    (("ask", "-"), None, "reads the message from stdin, which is closed"),
    (("ask", "hello", "--output", "/no/such/folder/reply.wav"), "", "does not exist"),
])
def test_ask_without_a_message_is_a_clear_error_before_anything_loads(tmp_path, args, stdin, said):
    result = run_cli(*args, input=stdin, close_stdin=stdin is None,
                     env={"PARLEY_DATA_DIR": str(tmp_path)}, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert said in result.stderr and result.stderr.startswith("parley-cli: error: ")
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert "loading" not in result.stderr  # no model was loaded first
    if said.startswith("ask needs"):
        assert "parley-cli ask \"" in result.stderr and "'-'" in result.stderr  # says what to give


def test_ask_help_says_what_happens_to_the_audio():
    result = run_cli("ask", "--help", timeout=60)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "without it the reply is text only (no audio is made, nothing plays)" in text
    assert "'-' reads it from stdin" in text
    listed = run_cli("--help", timeout=60).stdout
    assert "ask" in listed and "chat" in listed


def test_engine_say_refuses_no_words_and_an_engine_not_started():
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.errors import ConfigError, ParleyError

    engine = Engine(EngineConfig())
    with pytest.raises(ConfigError, match="a typed message needs words"):
        engine.say("  ")
    with pytest.raises(ParleyError, match="cannot answer a typed message while created; start it"):
        engine.say("hello")


def test_each_command_module_runs_on_its_own(capsys):
    from engine.cli import ask, chat
    from engine.cli.main import add_config_flags

    assert ask.main([""], add_config_flags) == 2
    assert "ask needs a message" in capsys.readouterr().err
    assert chat.main(["--text-only", "--output", "x.wav"], add_config_flags) == 2
    assert "give one of them" in capsys.readouterr().err
