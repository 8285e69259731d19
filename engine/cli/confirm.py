"""Asking on the terminal before a tool acts, and keeping a conversation out of the
history: what ``ask``, ``chat`` and ``converse`` share.

A tool with side effects (or one that would send stored conversations to a remote LLM)
needs the user's yes unless ``tools.trusted`` names it. ``TerminalConfirmer`` is the
engine's tool confirmer for a command line: with ``--yes`` it allows every call (and says
so on stderr); on a terminal it asks ``Run tool NAME with {...}? [y/N]`` on stderr and
reads the answer from stdin; with no terminal to ask on it declines, says on stderr why
and how to allow the tool, and the model is told that nobody could be asked
(``NobodyToAsk``), not that the user said no.

``--private`` (also spelled ``--no-history``, its older name) keeps the run's turns out of
the history, as the app's Private conversation does; ``history.enabled = false`` keeps
every run out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import TextIO

from engine.config import EngineConfig

#: How often a question on the terminal checks whether it was called off (Ctrl-C).
_POLL_S = 0.2
YES = ("y", "yes")


def add_privacy_arguments(parser: argparse.ArgumentParser, *, turns: str) -> None:
    """``--private`` (``--no-history``) and ``--yes`` of a command whose ``turns`` (words
    for the help: "the turn", "the turns") are answered by the engine."""
    parser.add_argument("--private", "--no-history", dest="private", action="store_true",
                        help=f"a private conversation: {turns} are not stored in the history "
                             "(--no-history is the same)")
    parser.add_argument("--yes", action="store_true",
                        help="run the assistant's tools that have side effects (or that would "
                             "send stored conversations to a remote LLM) without asking; "
                             "without it they are asked about on the terminal, and declined "
                             "when there is none")


def history_source(args: argparse.Namespace, config: EngineConfig, source: str) -> str | None:
    """The history's label of the run (``source``), or None when nothing is stored:
    ``--private``, or ``history.enabled`` off."""
    return None if args.private or not config.history.enabled else source


def _arguments_text(arguments: str) -> str:
    """A call's JSON arguments on one line (as written when not JSON)."""
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except ValueError:
        return arguments


class TerminalConfirmer:
    """The engine's tool confirmer on a command line; see the module doc. Called on the
    engine's tool worker thread; ``cancel`` (Ctrl-C) declines the question open now,
    ``close`` (the command ends) that one and every later one."""

    def __init__(self, *, allow_all: bool, stdin: TextIO | None = None,
                 stderr: TextIO | None = None) -> None:
        """``allow_all``: ``--yes``. ``stdin``/``stderr``: the terminal (default: the
        process's); questions are asked only when ``stdin`` is a terminal."""
        self.allow_all = allow_all
        self._stdin = stdin if stdin is not None else sys.stdin
        self._stderr = stderr if stderr is not None else sys.stderr
        self._closed = threading.Event()
        self._open = threading.Event()  # set: the question open now is called off

    @property
    def can_ask(self) -> bool:
        """True when someone can be asked: stdin is an open terminal."""
        stdin = self._stdin
        try:
            return stdin is not None and not stdin.closed and stdin.isatty()
        except (OSError, ValueError):
            return False

    def __call__(self, call, info) -> bool:
        """Whether ``call`` of the tool ``info`` may run; raises ``NobodyToAsk`` when
        nobody can be asked."""
        from engine.tools.runner import NobodyToAsk

        shown = f"{call.name} with {_arguments_text(call.arguments)}"
        if self.allow_all:
            self._say(f"parley-cli: running tool {shown} (allowed by --yes)")
            return True
        if self._closed.is_set():
            return False
        if not self.can_ask:
            how = (f"allow it with --yes, or name it in tools.trusted (--tools-trusted "
                   f"{call.name})")
            self._say(f"parley-cli: tool {shown} was not run: {self._why(info)}, and nobody "
                      f"could be asked (stdin is not a terminal); {how}")
            raise NobodyToAsk(f"no terminal to ask on; the user can {how}")
        why = self._why(info)
        self._say(f"\n{why[:1].upper()}{why[1:]}.")
        self._stderr.write(f"Run tool {shown}? [y/N] ")
        self._stderr.flush()
        self._open = called_off = threading.Event()
        answer = self._read_line(called_off)
        if answer is None:  # called off, or the end of input
            self._say("(not run)")
            return False
        return answer.strip().lower() in YES

    def cancel(self) -> None:
        """Decline the question open now, if any (Ctrl-C cut the reply off)."""
        self._open.set()

    def close(self) -> None:
        """Decline the question open now and every later one (the command ends)."""
        self._closed.set()
        self._open.set()

    @staticmethod
    def _why(info) -> str:
        if info.side_effects:
            return f"the assistant's tool {info.name} ({info.source}) has side effects"
        return (f"the assistant's tool {info.name} ({info.source}) returns stored "
                "conversations, which the remote LLM's server would receive")

    def _say(self, line: str) -> None:
        print(line, file=self._stderr, flush=True)

    def _read_line(self, called_off: threading.Event) -> str | None:
        """The answer typed, or None when ``called_off`` or at the end of input. On POSIX
        it waits in short steps, so that ``cancel`` ends the wait; elsewhere it reads."""
        stdin = self._stdin
        if os.name == "posix":
            import select

            try:
                fd = stdin.fileno()
            except (OSError, ValueError):
                return None
            while not (called_off.is_set() or self._closed.is_set()):
                ready, _w, _x = select.select([fd], [], [], _POLL_S)
                if ready:
                    break
            else:
                return None
        try:
            line = stdin.readline()
        except (OSError, ValueError):
            return None
        return line if line and not (called_off.is_set() or self._closed.is_set()) else None
