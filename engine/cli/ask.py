"""``parley-cli ask "text"``: one typed message answered through the pipeline.

The reply's text goes to stdout (or one JSON record with ``--json``); ``--output WAV``
speaks it into a WAV file. Without ``--output`` the reply is text only: no audio is
made and nothing plays, so the command needs no sound card. ``ask -`` reads the message
from stdin. The turn is stored in the history as typed unless ``--private`` (or
``history.enabled`` is off). A tool with side effects asks on the terminal first
(``--yes`` allows them all; with no terminal it is not run): ``engine/cli/confirm.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from engine.cli.confirm import add_privacy_arguments
from engine.config import EngineConfig, config_from_flags
from engine.errors import ParleyError, run_command

AddConfigFlags = Callable[[argparse.ArgumentParser], None]

_HELP = "answer one typed message: the reply's text on stdout, its audio into --output"
_AUDIO = ("write the spoken reply to this WAV file; without it the reply is text only "
          "(no audio is made, nothing plays)")


def add_language_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--language CODE``: ``stt.language`` (the same as ``--stt-language``), said for
    ``what`` the command takes in."""
    parser.add_argument("--language", dest="stt.language", metavar="CODE", default=None,
                        help=f"the language of {what}: a Whisper code (en, fr, de, es...) or auto "
                             "(detected per turn; needs a multilingual STT model); the reply "
                             "is in it (same as --stt-language)")


def add_arguments(parser: argparse.ArgumentParser, add_config_flags: AddConfigFlags) -> None:
    """The arguments of ``ask``, then every engine setting's flag."""
    parser.add_argument("message", nargs="?", default=None,
                        help="the message, in quotes; '-' reads it from stdin")
    parser.add_argument("--output", metavar="WAV", help=_AUDIO)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON record: the reply, the audio file, the turn's figures")
    add_language_argument(parser, "the message")
    add_privacy_arguments(parser, turns="the message and its reply")
    add_config_flags(parser)


def add_ask_parser(sub, add_config_flags: AddConfigFlags) -> None:
    """``parley-cli ask`` in the command line's subcommands."""
    add_arguments(sub.add_parser("ask", help=_HELP, description=_HELP + ". " + _AUDIO[0].upper()
                                 + _AUDIO[1:] + "."), add_config_flags)


def message_of(args: argparse.Namespace) -> str:
    """The message to send: the argument, or stdin for '-'; a ParleyError (exit code 2)
    that says what to give when there are no words."""
    from engine.cli.typed import stdin_text

    if args.message is None or not args.message.strip():
        raise ParleyError('ask needs a message: give it in quotes (parley-cli ask "What is the '
                          "capital of France?\"), or '-' to read it from stdin")
    if args.message.strip() == "-":
        text = stdin_text("ask")
        if not text.strip():
            raise ParleyError("ask - read no message from stdin (it was empty); pipe the message "
                              "in (echo 'What time is it?' | parley-cli ask -)")
        return text.strip()
    return args.message.strip()


def run_ask(args: argparse.Namespace, config: EngineConfig) -> int:
    """Answer the message; 0, or 1 when a stage reported an error on the turn."""
    from engine.audio.file_sink import FileSink
    from engine.cli.confirm import TerminalConfirmer, history_source
    from engine.cli.converse import check_output
    from engine.cli.output import write_json
    from engine.cli.typed import TypedConversation
    from engine.report import turn_dict

    text = message_of(args)  # before anything loads
    check_output(args.output)
    sink = FileSink(args.output, realtime=False)
    confirmer = TerminalConfirmer(allow_all=args.yes)
    with TypedConversation(config, sink, history=history_source(args, config, "ask"),
                           confirmer=confirmer) as chat:
        answer = chat.answer(text, speak=args.output is not None)
        placements, notes = chat.engine.placement_dicts(), list(chat.engine.notes)
    # closed: the WAV file is written
    record = answer.record
    audio_s = round(sink.audio.size / sink.sample_rate, 3) if sink.sample_rate else 0.0
    if args.json:
        write_json({"message": text, "reply": answer.reply,
                    "audio": args.output if args.output and audio_s else None,
                    "audio_s": audio_s if args.output else None,
                    "kind": None if record is None else record.kind.value,
                    "turn": None if record is None else turn_dict(record),
                    "tool_calls": [{"name": c.call.name, "arguments": c.call.arguments,
                                    "error": c.error} for c in answer.tool_calls],
                    "placements": placements, "notes": notes, "errors": answer.errors})
    else:
        for error in answer.errors:
            print(f"parley-cli: error in {error}", file=sys.stderr)
        print(answer.reply or "(no reply)")
        if args.output:
            print(f"reply spoken into {args.output} ({audio_s:.1f} s)",
                  file=sys.stderr)
    return 1 if answer.errors or record is None or record.cancelled else 0


def main(argv: list[str], add_config_flags: AddConfigFlags) -> int:
    """``parley-cli ask`` on its own: parse ``argv`` and run it; returns the exit status."""
    parser = argparse.ArgumentParser(prog="parley-cli ask", description=_HELP)
    add_arguments(parser, add_config_flags)
    args = parser.parse_args(argv)
    return run_command(lambda: run_ask(args, config_from_flags(args)))
