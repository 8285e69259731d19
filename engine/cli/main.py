"""``parley-cli``: converse with a recording, ask a typed question (``ask``) or chat in text
(``chat``), list devices, benchmark, serve realtime clients, check this computer (``doctor``).

Every config setting has a flag derived from its field (``stt.device`` is
``--stt-device``); ``--config FILE`` loads a TOML file first and flags override it.
Progress goes to stderr, so ``--json`` output on stdout stays clean.

This module parses the arguments and dispatches to the subcommand modules
(``engine.cli.converse``, ``engine.cli.devices``, ``engine.cli.serve``); they never import
it back (what they share lives in ``engine.cli.output``).
"""

from __future__ import annotations

import argparse
import enum
import logging
import sys

from engine.config import EngineConfig, config_fields, config_from_flags
from engine.errors import ParleyError, run_command


def _flag(dotted: str) -> str:
    return "--" + dotted.replace(".", "-").replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per EngineConfig setting, plus ``--config``."""
    parser.add_argument("--config", metavar="FILE", help="TOML engine config (flags override it)")
    group = parser.add_argument_group("engine settings (see README for the TOML keys)")
    for dotted, field, tp in config_fields():
        default = field.default if field.default is not field.default_factory else None
        if isinstance(default, enum.Enum):
            default = default.value
        choices = [m.value for m in tp] if isinstance(tp, type) and issubclass(tp, enum.Enum) else None
        group.add_argument(_flag(dotted), dest=dotted, metavar=tp.__name__.upper() if not choices else None,
                           choices=choices, default=None,
                           help=f"{field.metadata.get('help', '')} (default: {default})")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The config of ``--config`` and the setting flags given."""
    return config_from_flags(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley-cli", description="Parley voice assistant engine")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    conv = sub.add_parser("converse", help="run every turn of a recording through the pipeline")
    conv.add_argument("input", help="recording (wav, flac, mp3, ogg; any rate and channels)")
    conv.add_argument("--output", metavar="WAV", help="write the replies' audio here")
    conv.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    conv.add_argument("--fast", action="store_true",
                      help="feed the recording as fast as possible instead of at real time")
    from engine.cli.confirm import add_privacy_arguments  # light: --private, --yes

    add_privacy_arguments(conv, turns="the turns")
    from engine.cli.ask import add_language_argument  # light: argparse only

    add_language_argument(conv, "the recording's speech")
    add_config_flags(conv)

    dev = sub.add_parser("devices", help="list compute devices, remote servers and sound cards")
    dev.add_argument("--json", action="store_true")
    add_config_flags(dev)  # a stage's base_url (--llm-base-url...) lists its server, probed

    bench = sub.add_parser("bench", help="per-stage and voice-to-voice latency, models preloaded "
                                         "(`bench serve --help`: the realtime server; `bench lost-turns`: "
                                         "it stressed for lost turns; `bench turn-taking`: "
                                         "end-of-turn modes on real speech; `bench llm-runtimes`: "
                                         "CPU LLM runtimes side by side; `bench language`: "
                                         "language detection and WER per language; "
                                         "`bench --quality --help`: STT word error rate and "
                                         "answers on the spoken test set)")
    bench.add_argument("input", help="recording streamed at real time")
    bench.add_argument("--runs", type=int, default=3, help="number of runs (default 3)")
    bench.add_argument("--json", action="store_true")
    bench.add_argument("--compare", metavar="KEY=A,B", action="append", default=[],
                       help="measure each value of a setting side by side in one run, "
                            "e.g. --compare turns.speculative=false,true (runs interleave)")
    bench.add_argument("--variant", metavar="KEY=V[,KEY=V]", action="append", default=[],
                       help="a named set of settings to measure side by side with the others, "
                            "e.g. --variant stt.device=mlx,stt.model=DIR --variant stt.device=cpu")
    add_config_flags(bench)

    from engine.cli.serve import add_serve_arguments  # light: aiohttp loads only to serve

    serve = sub.add_parser("serve", help="serve the OpenAI Realtime API over WebSocket "
                                         "(/v1/realtime), one pipeline unit per client")
    add_serve_arguments(serve)
    add_config_flags(serve)

    from engine.cli.ask import add_ask_parser  # light: the engine loads only to answer
    from engine.cli.chat import add_chat_parser

    add_ask_parser(sub, add_config_flags)
    add_chat_parser(sub, add_config_flags)
    from engine.cli.mcp import add_mcp_parser  # light: the MCP SDK loads only to serve

    add_mcp_parser(sub, add_config_flags)
    from engine.cli.tools import add_tools_parser  # light: the tools load only to run

    add_tools_parser(sub, add_config_flags)
    from engine.cli.history import add_history_parser  # light: sqlite3 only

    add_history_parser(sub)
    from engine.cli.models import add_models_parser  # light: huggingface_hub loads to scan

    add_models_parser(sub)
    from engine.cli.tls import add_tls_parser  # light: ssl and cryptography load to run it

    add_tls_parser(sub)
    from engine.cli.calibrate import add_calibrate_parser  # light: measures only when run

    add_calibrate_parser(sub)
    from engine.cli.doctor import add_doctor_parser  # light: the checks import their libraries when run

    add_doctor_parser(sub, add_config_flags)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``parley-cli``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["bench", "soak"]:  # its own parser; `bench INPUT` is unchanged
        from engine.bench.soak import main as bench_soak

        return bench_soak(argv[2:], add_config_flags)
    if argv[:2] == ["bench", "lost-turns"]:  # the realtime server stressed for lost turns
        from engine.bench.lost_turns import main as bench_lost_turns

        return bench_lost_turns(argv[2:], add_config_flags)
    if argv[:2] == ["bench", "calibration"]:  # the calibration against random-weight runs
        from engine.bench.calibration_check import main as bench_calibration

        return bench_calibration(argv[2:])
    if argv[:2] == ["bench", "llm-runtimes"]:  # CPU LLM runtimes side by side
        from engine.bench.llm_runtimes import main as bench_llm_runtimes

        return bench_llm_runtimes(argv[2:])
    if argv[:2] == ["bench", "turn-taking"]:  # end-of-turn modes on the reference recordings
        from engine.bench.turn_taking import main as bench_turn_taking

        return bench_turn_taking(argv[2:], add_config_flags)
    if argv[:2] == ["bench", "language"]:  # language detection and WER per language
        from engine.bench.language import main as bench_language

        return bench_language(argv[2:], add_config_flags)
    if argv[:2] == ["bench", "serve"]:  # its own parser; `bench INPUT` is unchanged
        from engine.bench.serve import main as bench_serve

        return bench_serve(argv[2:], add_config_flags)
    if argv[:1] == ["bench"] and "--quality" in argv:  # the spoken test set, scored
        from engine.bench.quality import main as bench_quality

        return bench_quality(argv[1:], add_config_flags)
    if argv[:1] == ["bench"] and any(a == "--layouts" or a.startswith("--layouts=") for a in argv):
        from engine.bench.lab import main as bench_layouts  # INPUT... through each layout

        return bench_layouts(argv[1:], add_config_flags)
    if argv[:1] == ["bench"] and any(a == "--weights" or a.startswith("--weights=") for a in argv):
        from engine.bench.random_stack import main as bench_random  # the stack a machine gets

        return bench_random(argv[1:], add_config_flags)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)
    return run_command(lambda: _dispatch(args))


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed subcommand; its module loads only now (``--help`` stays fast)."""
    if args.command == "devices":
        from engine.cli.devices import run_devices

        return run_devices(args.json, config_from_args(args))
    if args.command == "converse":
        from engine.cli.converse import run_converse

        return run_converse(args, config_from_args(args))
    if args.command == "bench":
        from engine.cli.converse import run_bench

        if args.runs < 1:
            raise ParleyError(f"--runs must be at least 1; got {args.runs}")
        return run_bench(args, config_from_args(args))
    if args.command == "ask":
        from engine.cli.ask import run_ask

        return run_ask(args, config_from_args(args))
    if args.command == "chat":
        from engine.cli.chat import run_chat

        return run_chat(args, config_from_args(args))
    if args.command == "mcp":
        from engine.cli.mcp import run_mcp

        return run_mcp(args, config_from_args(args))
    if args.command == "tools":
        from engine.cli.tools import run_tools

        return run_tools(args, config_from_args(args))
    if args.command == "history":
        from engine.cli.history import run_history

        return run_history(args)
    if args.command == "models":
        from engine.cli.models import run_models

        return run_models(args)
    if args.command == "doctor":
        from engine.cli.doctor import run_doctor

        return run_doctor(args, config_from_args(args))
    if args.command == "calibrate":
        from engine.cli.calibrate import run_calibrate

        return run_calibrate(args)
    if args.command == "tls":
        from engine.cli.tls import run_tls

        return run_tls(args)
    if args.command == "serve":
        from engine.cli.serve import run_serve

        return run_serve(args, config_from_args(args))
    raise ParleyError(f"unknown command {args.command!r}")  # argparse allows only the above

if __name__ == "__main__":
    sys.exit(main())
