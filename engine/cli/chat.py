"""``parley-cli chat``: a text conversation in the terminal.

Each line read from stdin is a typed message; its reply is printed as it streams (one
line per reply, ``parley: ...``) and spoken on the speaker, or into ``--output WAV``,
unless ``--text-only``. ``/quit`` or end of input (Ctrl-D) ends the chat; ``/new``
starts the conversation over; an empty line is skipped with a hint on stderr. Ctrl-C
during a reply cuts it off, at the prompt it ends the chat. The turns are stored in the
history as typed unless ``--private`` (or ``history.enabled`` is off). A tool with side
effects asks on the terminal first (``--yes`` allows them all; with no terminal it is not
run): ``engine/cli/confirm.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from engine.cli.confirm import add_privacy_arguments
from engine.config import EngineConfig, config_from_flags
from engine.errors import ParleyError, run_command

if TYPE_CHECKING:
    from engine.cli.typed import TypedConversation

AddConfigFlags = Callable[[argparse.ArgumentParser], None]

_HELP = "a text conversation: type a line, read (and hear) the reply; /quit or Ctrl-D ends it"
_QUIT, _NEW = "/quit", "/new"
#: The longest the chat waits, at its end, for a reply still playing on the speaker.
_PLAYING_S = 120.0


def add_arguments(parser: argparse.ArgumentParser, add_config_flags: AddConfigFlags) -> None:
    """The arguments of ``chat``, then every engine setting's flag."""
    parser.add_argument("--text-only", action="store_true",
                        help="reply in text only: no audio is made, nothing plays")
    parser.add_argument("--output", metavar="WAV",
                        help="write the spoken replies to this WAV file instead of the speaker")
    add_privacy_arguments(parser, turns="the turns")
    add_config_flags(parser)


def add_chat_parser(sub, add_config_flags: AddConfigFlags) -> None:
    """``parley-cli chat`` in the command line's subcommands."""
    add_arguments(sub.add_parser("chat", help=_HELP, description=_HELP + f"; {_NEW} starts over."),
                  add_config_flags)


def _lines(interactive: bool) -> Iterator[str]:
    """The user's lines until end of input; the prompt only on a terminal."""
    while True:
        if interactive:
            try:
                yield input("you: ")
            except EOFError:
                print(file=sys.stderr)
                return
            continue
        line = sys.stdin.readline()
        if not line:
            return
        yield line


def _check_stdin() -> None:
    if sys.stdin is None or sys.stdin.closed:
        raise ParleyError("chat reads your messages from stdin, which is closed; run it in a "
                          "terminal, or pipe the messages in, one a line")


def run_chat(args: argparse.Namespace, config: EngineConfig) -> int:
    """Answer each line until /quit or end of input; 0, or 1 when a reply failed."""
    from engine.audio.file_sink import FileSink
    from engine.cli.confirm import TerminalConfirmer, history_source
    from engine.cli.converse import check_output
    from engine.cli.typed import TypedConversation

    if args.text_only and args.output:  # before anything loads
        raise ParleyError("--output writes the spoken replies, and --text-only makes none; "
                          "give one of them")
    _check_stdin()
    check_output(args.output)
    speak = not args.text_only
    if args.output or not speak:
        sink = FileSink(args.output, realtime=False)
    else:
        from engine.audio.speaker import SpeakerSink

        sink = SpeakerSink(config.audio.output_device)
    interactive = sys.stdin.isatty()
    failed = False
    history = history_source(args, config, "chat")
    confirmer = TerminalConfirmer(allow_all=args.yes)
    with TypedConversation(config, sink, history=history, confirmer=confirmer) as chat:
        print(f"parley chat: type a message and press Enter; {_NEW} starts over, {_QUIT} or "
              "Ctrl-D ends" + ("" if history else "; a private conversation: nothing is stored"),
              file=sys.stderr)
        for line in _lines(interactive):
            text = line.strip()
            if text == _QUIT:
                break
            if text == _NEW:
                chat.new_conversation()
                print("(a new conversation)", file=sys.stderr)
                continue
            if not text:
                print(f"(nothing to send: type a message, or {_QUIT} to end)", file=sys.stderr)
                continue
            failed = not _answer(chat, text, speak) or failed
        if speak and not args.output:
            chat.wait_heard(_PLAYING_S)
    return 1 if failed else 0


def _answer(chat: TypedConversation, text: str, speak: bool) -> bool:
    """One reply, printed as it streams; False when it failed."""
    started = False

    def show(clause: str) -> None:
        nonlocal started
        sys.stdout.write(("" if started else "parley: ") + (" " if started else "") + clause)
        sys.stdout.flush()
        started = True

    try:
        answer = chat.answer(text, speak=speak, on_text=show)
    except KeyboardInterrupt:
        print(" (cut off)" if started else "parley: (cut off)", flush=True)
        return True
    if not started:
        sys.stdout.write("parley: (no reply)")
    print(flush=True)
    for error in answer.errors:
        print(f"parley-cli: error in {error}", file=sys.stderr)
    return not answer.errors


def main(argv: list[str], add_config_flags: AddConfigFlags) -> int:
    """``parley-cli chat`` on its own: parse ``argv`` and run it; returns the exit status."""
    parser = argparse.ArgumentParser(prog="parley-cli chat", description=_HELP)
    add_arguments(parser, add_config_flags)
    args = parser.parse_args(argv)
    return run_command(lambda: run_chat(args, config_from_flags(args)))
