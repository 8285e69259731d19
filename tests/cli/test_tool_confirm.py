"""The command line asks before a tool acts, and keeps a private conversation out of the
history.

``TerminalConfirmer`` alone, on a real pseudo-terminal: the question and its answers, a
question called off, ``--yes``, and no terminal (declined, saying how to allow it). Then
``parley-cli ask`` and ``chat`` on the offline speech models with the LLM remote, a
loopback chat server (``tests/support/chat_server.py``) that answers "set a timer" with
the recorded call of ``set_timer``: with no terminal the call is not run and the model is
told why; ``--yes`` runs it; on a terminal the user's "y" does; ``--private`` leaves the
history database without a row.
"""

from __future__ import annotations

import io
import json
import os
import pty
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from engine.backends.base import ToolCall
from engine.cli.confirm import TerminalConfirmer
from engine.tools.registry import ToolInfo
from engine.tools.runner import NobodyToAsk
from tests.support.chat_server import ChatServer
from tests.support.cli import run_cli
from tests.support.paths import ROOT

TEA = ToolCall("call_1", "set_timer", '{"seconds": 2, "label": "tea"}')
SET_TIMER = ToolInfo("set_timer", "Start a countdown timer.", True, "built-in")
SEARCH = ToolInfo("search_history", "Search the past conversations.", False, "built-in",
                  returns_history=True)


@pytest.fixture
def terminal():
    """A pseudo-terminal: ``(stdin, keyboard)``, the file the confirmer reads (a tty)
    and the fd the test types into."""
    keyboard, tty = pty.openpty()
    stdin = os.fdopen(tty, "r", encoding="utf-8", closefd=True)
    yield stdin, keyboard
    stdin.close()
    os.close(keyboard)


def _ask_on_thread(confirm, call=TEA, info=SET_TIMER):
    answers: list[object] = []

    def ask() -> None:
        try:
            answers.append(confirm(call, info))
        except NobodyToAsk as exc:  # collected: a raise in a thread is lost
            answers.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, answers


def _wait_for(text: str, stream: io.StringIO, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in stream.getvalue():
        assert time.monotonic() < deadline, f"{text!r} not in {stream.getvalue()!r}"
        time.sleep(0.02)


@pytest.mark.parametrize("typed, runs", [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False)])
def test_on_a_terminal_the_user_is_asked_and_the_answer_decides(terminal, typed, runs):
    stdin, keyboard = terminal
    stderr = io.StringIO()
    confirm = TerminalConfirmer(allow_all=False, stdin=stdin, stderr=stderr)
    assert confirm.can_ask
    thread, answers = _ask_on_thread(confirm)
    _wait_for("[y/N] ", stderr)
    assert 'Run tool set_timer with {"seconds": 2, "label": "tea"}? [y/N] ' in stderr.getvalue()
    assert "has side effects" in stderr.getvalue()
    assert thread.is_alive() and answers == []  # waiting for the user
    os.write(keyboard, typed.encode())
    thread.join(5.0)
    assert answers == [runs]


def test_a_question_called_off_is_a_no_and_the_next_is_asked_again(terminal):
    stdin, keyboard = terminal
    stderr = io.StringIO()
    confirm = TerminalConfirmer(allow_all=False, stdin=stdin, stderr=stderr)
    thread, answers = _ask_on_thread(confirm, info=SEARCH)
    _wait_for("[y/N] ", stderr)
    assert "returns stored conversations, which the remote LLM's server would receive" in stderr.getvalue()
    confirm.cancel()  # Ctrl-C cut the reply off
    thread.join(5.0)
    assert answers == [False] and "(not run)" in stderr.getvalue()
    thread, answers = _ask_on_thread(confirm)
    _wait_for("set_timer with", stderr)
    os.write(keyboard, b"y\n")
    thread.join(5.0)
    assert answers == [True]
    confirm.close()  # the command ends: nothing is asked any more
    assert confirm(TEA, SET_TIMER) is False


def test_yes_allows_every_call_and_says_so():
    stderr = io.StringIO()
    confirm = TerminalConfirmer(allow_all=True, stdin=io.StringIO(""), stderr=stderr)
    assert confirm(TEA, SET_TIMER) is True
    assert stderr.getvalue() == ('parley-cli: running tool set_timer with {"seconds": 2, "label": "tea"} '
                                 "(allowed by --yes)\n")


def test_with_no_terminal_nobody_is_asked_and_stderr_says_how_to_allow_it():
    stderr = io.StringIO()
    confirm = TerminalConfirmer(allow_all=False, stdin=io.StringIO("y\n"), stderr=stderr)
    assert not confirm.can_ask
    with pytest.raises(NobodyToAsk, match="no terminal to ask on; the user can allow it with --yes"):
        confirm(TEA, SET_TIMER)
    said = stderr.getvalue()
    assert said.startswith("parley-cli: tool set_timer with {") and "was not run" in said
    assert "nobody could be asked (stdin is not a terminal)" in said
    assert "--yes" in said and "tools.trusted (--tools-trusted set_timer)" in said


# ---------------------------------------------------------------------- parley-cli itself
@pytest.fixture(scope="module")
def chat():
    server = ChatServer()
    yield server
    server.close()


def _remote(chat: ChatServer) -> list[str]:
    return ["--llm-backend", "openai", "--llm-base-url", chat.url, "--llm-model", chat.model]


def _timers(data_dir) -> list[str]:
    path = data_dir / "timers.json"
    if not path.exists():
        return []
    return [t["label"] for t in json.loads(path.read_text("utf-8"))]


def _history_rows(data_dir) -> int:
    path = data_dir / "history.db"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as raw:
        return raw.execute("SELECT count(*) FROM turns").fetchone()[0]


@pytest.mark.slow
def test_ask_with_no_terminal_does_not_run_the_tool_and_yes_runs_it(tmp_path, chat):
    env = {"PARLEY_DATA_DIR": str(tmp_path)}
    refused = run_cli("ask", "Set a timer for my tea.", "--json", "--private", *_remote(chat),
                      input="", env=env)
    assert refused.returncode == 0, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "tool set_timer with" in refused.stderr and "was not run" in refused.stderr
    assert "--yes" in refused.stderr and "tools.trusted" in refused.stderr
    data = json.loads(refused.stdout)
    (call,) = data["tool_calls"]
    assert call["name"] == "set_timer" and "nobody could be asked" in call["error"]
    # The model was told the truth (the chat server quotes the tool's output), not "declined".
    assert "nobody could be asked" in data["reply"] and "declined" not in data["reply"]
    assert _timers(tmp_path) == []
    assert _history_rows(tmp_path) == 0  # --private

    allowed = run_cli("ask", "Set a timer for my tea.", "--json", "--yes", *_remote(chat),
                      input="", env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert "running tool set_timer with" in allowed.stderr and "(allowed by --yes)" in allowed.stderr
    data = json.loads(allowed.stdout)
    assert [c["error"] for c in data["tool_calls"]] == [None]
    # The model was given the timer set (the chat server quotes the output).
    assert "Here is what the tool found" in data["reply"] and "tea" in data["reply"]
    assert _history_rows(tmp_path) == 2  # stored: the typed turn and the answer's turn


@pytest.mark.slow
def test_chat_on_a_terminal_asks_and_runs_the_tool_on_yes_and_stores_nothing_private(tmp_path, chat):
    keyboard, tty = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "chat", "--text-only", "--private", *_remote(chat)],
        cwd=ROOT, env={**os.environ, "PARLEY_DATA_DIR": str(tmp_path)}, stdin=tty,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(tty)
    err: list[bytes] = []
    out: list[bytes] = []
    readers = [threading.Thread(target=lambda s=s, into=into: into.extend(iter(lambda: s.read1(4096), b"")))
               for s, into in ((process.stderr, err), (process.stdout, out))]
    for reader in readers:
        reader.start()

    def wait(text: bytes, where: list[bytes], timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in b"".join(where):
            assert process.poll() is None, b"".join(err).decode(errors="replace")
            assert time.monotonic() < deadline, b"".join(err).decode(errors="replace")
            time.sleep(0.05)

    try:
        wait(b"type a message and press Enter", err)
        assert b"a private conversation: nothing is stored" in b"".join(err)
        os.write(keyboard, b"Set a timer for my tea.\n")
        wait(b"[y/N] ", err, 60)
        assert b'Run tool set_timer with {"seconds": 2, "label": "tea"}? [y/N] ' in b"".join(err)
        assert _timers(tmp_path) == []  # asked, not answered: not run
        os.write(keyboard, b"y\n")
        wait(b"tea", out, 60)
        os.write(keyboard, b"/quit\n")
        assert process.wait(60) == 0, b"".join(err).decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        os.close(keyboard)
        for reader in readers:
            reader.join(10)
    said = b"".join(out).decode()
    assert "Here is what the tool found" in said and "tea" in said
    assert b"Traceback" not in b"".join(err)
    assert _history_rows(tmp_path) == 0  # a private conversation: nothing stored
