"""``parley-cli chat``: a text conversation on the offline stack (real models). Each line
is answered (one ``parley: ...`` line on stdout, streamed) and spoken, here into --output;
an empty line is skipped with a hint; /quit or the end of input ends it cleanly; the turns
are stored in the history as typed; /new starts a new conversation."""

import pytest
import soundfile as sf

from engine.history.store import HistoryStore
from engine.pipeline.metrics import TurnKind
from tests.support.cli import run_cli
from tests.support.transcripts import normalize


def _turns(data_dir):
    with HistoryStore(data_dir / "history.db") as store:
        return [t for c in reversed(store.conversations()) for t in store.conversation(c.id).turns]


@pytest.mark.slow
def test_chat_answers_each_line_speaks_it_and_stores_it_as_typed(tmp_path):
    replies = tmp_path / "replies.wav"
    lines = "What is the capital of France?\n\n   \nAnd what is the capital of Italy?\n/quit\nNot sent.\n"
    result = run_cli("chat", "--output", str(replies), input=lines,
                     env={"PARLEY_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout.splitlines()
    assert len(out) == 2 and all(line.startswith("parley: ") for line in out), out
    assert "paris" in normalize(out[0]) and "rome" in normalize(out[1])
    assert result.stderr.count("(nothing to send: type a message, or /quit to end)") == 2
    audio, rate = sf.read(replies, dtype="float32")
    assert audio.size / rate > 2.0  # both replies were spoken
    turns = _turns(tmp_path)
    assert [t.transcript for t in turns] == ["What is the capital of France?",
                                             "And what is the capital of Italy?"]
    assert all(t.kind is TurnKind.TYPED for t in turns)
    assert [normalize(t.reply) for t in turns] == [normalize(line[len("parley: "):]) for line in out]


@pytest.mark.slow
def test_chat_in_text_only_ends_at_the_end_of_input_and_starts_over_on_new(tmp_path):
    lines = "What is the capital of France?\n/new\nHello!"  # no newline, no /quit: EOF ends it
    result = run_cli("chat", "--text-only", input=lines, env={"PARLEY_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert len(out) == 2 and "paris" in normalize(out[0]) and out[1].startswith("parley: ")
    assert "(a new conversation)" in result.stderr
    with HistoryStore(tmp_path / "history.db") as store:
        conversations = [store.conversation(c.id) for c in reversed(store.conversations())]
    assert [[t.transcript for t in c.turns] for c in conversations] == [
        ["What is the capital of France?"], ["Hello!"]]
    assert all(c.source == "chat" for c in conversations)


@pytest.mark.parametrize("args, said", [
    (("chat",), "chat reads your messages from stdin, which is closed"),
    (("chat", "--text-only", "--output", "x.wav"), "give one of them"),
])
def test_chat_errors_are_clear_before_anything_loads(tmp_path, args, said):
    result = run_cli(*args, close_stdin=said.startswith("chat reads"), input=None if
                     said.startswith("chat reads") else "", env={"PARLEY_DATA_DIR": str(tmp_path)},
                     timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert said in result.stderr and "Traceback" not in result.stderr
    assert "loading" not in result.stderr
