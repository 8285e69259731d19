"""``parley-cli history``: the stored conversations (``engine.history``) from a terminal.

``list [--day YYYY-MM-DD] [--limit N]``, ``show ID``, ``search QUERY``,
``export ID --format md|json [--output FILE]`` and ``delete ID --yes``; each takes
``--db PATH`` (default: ``history.db`` in the user's data folder, or
``$PARLEY_DATA_DIR``), and the reading ones ``--json``. Reading never creates a
database that is not there. Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine.cli.output import write_json
from engine.errors import ParleyError
from engine.history.export import EXPORT_FORMATS, describe_placement, local_time
from engine.history.store import HistoryError, HistoryStore, StoredConversation, history_path, parse_day

COMMANDS = ("list", "show", "search", "export", "delete")


def add_history_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Define ``history`` and its subcommands on ``parley-cli``'s subparsers."""
    history = subparsers.add_parser(
        "history", help="the stored conversations: list, show, search, export, delete",
        description="Every finished turn is stored as it completes; these commands read the "
                    "history database (default: history.db in the user's data folder, or "
                    "$PARLEY_DATA_DIR).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="PATH",
                        help=f"the history database (default: {history_path()})")
    sub = history.add_subparsers(dest="history_command", required=True,
                                 metavar="{" + ",".join(COMMANDS) + "}")

    ls = sub.add_parser("list", parents=[common], help="conversations, newest first")
    ls.add_argument("--day", metavar="YYYY-MM-DD", help="only those started that day (local time)")
    ls.add_argument("--limit", type=int, default=20, metavar="N", help="at most N (default 20)")
    ls.add_argument("--json", action="store_true", help="one JSON document on stdout")

    show = sub.add_parser("show", parents=[common], help="one conversation, turn by turn")
    show.add_argument("id", type=int, metavar="ID", help="the conversation's id (see `history list`)")
    show.add_argument("--json", action="store_true", help="one JSON document on stdout")

    search = sub.add_parser("search", parents=[common], help="full-text search of what was said",
                            description='QUERY is FTS5 syntax: words (all must occur), "a phrase", '
                                        "word* (prefix), OR, NOT; --literal takes the words as typed.")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--literal", action="store_true",
                        help="search the words as typed, ignoring query syntax")
    search.add_argument("--limit", type=int, default=20, metavar="N", help="at most N hits (default 20)")
    search.add_argument("--json", action="store_true", help="one JSON document on stdout")

    export = sub.add_parser("export", parents=[common], help="a conversation as Markdown or JSON")
    export.add_argument("id", type=int, metavar="ID")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    export.add_argument("--output", metavar="FILE", help="write here instead of stdout")

    delete = sub.add_parser("delete", parents=[common], help="remove a conversation for good")
    delete.add_argument("id", type=int, metavar="ID")
    delete.add_argument("--yes", action="store_true", help="really delete it")
    return history


def run_history(args: argparse.Namespace) -> int:
    """Run one ``history`` subcommand; errors are printed, never raised."""
    try:
        return _run(args)
    except ParleyError as exc:
        print(f"parley-cli: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `parley-cli history list | head`: the reader has had enough
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 0


def _run(args: argparse.Namespace) -> int:
    command = args.history_command
    path = Path(args.db) if getattr(args, "db", None) else history_path()
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 1:
        raise HistoryError(f"--limit must be at least 1; got {limit}")
    day = parse_day(args.day) if getattr(args, "day", None) else None
    if command == "delete" and not args.yes:
        raise HistoryError(f"delete removes conversation {args.id} and its turns for good; "
                           "add --yes to do it")
    if command == "export" and args.output:
        folder = Path(args.output).resolve().parent
        if not folder.is_dir():
            raise HistoryError(f"--output {args.output}: folder {folder} does not exist")
    if not path.exists():  # reading never creates a database
        if command in ("list", "search"):
            if args.json:
                write_json({"database": str(path), "conversations" if command == "list" else "hits": []})
            else:
                print(f"no conversations yet: {path} does not exist", file=sys.stderr)
            return 0
        raise HistoryError(f"no conversation {args.id}: the history database {path} does not exist")
    with HistoryStore(path) as store:
        if store.notice:
            print(f"parley-cli: note: {store.notice}", file=sys.stderr)
        return _COMMANDS[command](store, args, day)


def _list(store: HistoryStore, args: argparse.Namespace, day) -> int:
    found = store.conversations(day=day, limit=args.limit)
    if args.json:
        write_json({"database": str(store.path), "conversations": [c.as_dict() for c in found]})
        return 0
    if not found:
        print(f"no conversations{f' on {day}' if day else ''} in {store.path}", file=sys.stderr)
        return 0
    print(f"{'ID':>5}  {'STARTED':22}  {'TURNS':>5}  {'SOURCE':24}  TITLE")
    for c in found:
        print(f"{c.id:>5}  {local_time(c.started_at, seconds=False):22}  {c.turns:>5}  "
              f"{_tail(c.source, 24):24}  {c.title or '(no words)'}")
    return 0


def _show(store: HistoryStore, args: argparse.Namespace, _day) -> int:
    conversation = store.conversation(args.id)
    if args.json:
        write_json(conversation.as_dict())
    else:
        print(format_conversation(conversation))
    return 0


def _search(store: HistoryStore, args: argparse.Namespace, _day) -> int:
    hits = store.search(args.query, limit=args.limit, literal=args.literal)
    if args.json:
        write_json({"database": str(store.path), "query": args.query, "hits": [h.as_dict() for h in hits]})
        return 0
    if not hits:
        print(f"nothing matches {args.query!r}", file=sys.stderr)
        return 0
    for hit in hits:
        print(f"conversation {hit.conversation_id} turn {hit.turn_id} ({hit.kind.value}, "
              f"{local_time(hit.finished_at, seconds=False)}): {hit.snippet}")
    return 0


def _export(store: HistoryStore, args: argparse.Namespace, _day) -> int:
    text = store.export(args.id, args.format)
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"--output {args.output}: {exc.strerror or exc}") from None
    print(f"conversation {args.id} written to {args.output}", file=sys.stderr)
    return 0


def _delete(store: HistoryStore, args: argparse.Namespace, _day) -> int:
    turns = store.delete(args.id)
    print(f"conversation {args.id} deleted ({turns} turn{'s' if turns != 1 else ''})", file=sys.stderr)
    return 0


_COMMANDS = {"list": _list, "show": _show, "search": _search, "export": _export, "delete": _delete}


def format_conversation(conversation: StoredConversation) -> str:
    """A conversation for the terminal: a header line, then a few lines per turn."""
    lines = [f"conversation {conversation.id} · started {local_time(conversation.started_at)} · "
             f"{conversation.source}"]
    lines += [f"  {describe_placement(p)}" for p in conversation.placements]
    for turn in conversation.turns:
        lines.append(f"turn {turn.turn_id}{' (cut off)' if turn.cancelled else ''} · "
                     f"{turn.kind.value} · {local_time(turn.finished_at)}")
        lines.append(f"  you:    {turn.transcript or '(no words recognised)'}")
        lines.append(f"  parley: {turn.reply or '(no reply)'}")
        v2v = turn.figures.get("voice_to_voice_s")
        if v2v is not None:
            lines.append(f"  voice-to-voice: {v2v * 1000:.0f} ms")
    if not conversation.turns:
        lines.append("(no turns)")
    return "\n".join(lines)


def _tail(text: str, width: int) -> str:
    """The end of a long label: of a recording's path, its name matters most."""
    return text if len(text) <= width else "…" + text[-(width - 1):]
