"""``parley-cli bench lost-turns``: is a committed turn ever dropped under load?

One ``parley-cli serve`` with one unit per client, ``--burners`` processes spinning on the
CPU for the whole run (two busy cores, bounded in time), and ``--clients`` clients at
once, each playing ``--repeats`` sessions of the same script on a fresh connection:

1. the three-question recording (``librispeech_three_turns.flac``) spoken straight
   through: its second question starts 1.35 s after the first one ended, moments after
   the server commits the first turn and usually before its reply, so the first reply is
   cut by a barge-in while its turn may still be in the STT;
2. one question, answered and played out (``SpokenSession.ask``);
3. a question, then another spoken over its reply (a barge-in ``0.3..1.5`` s into the
   reply's audio, seeded).

Every committed turn is classified from the server's events (``engine.bench.turn_ledger``:
answered, cut by a barge-in, dropped, lost). A lost turn is one committed and then
cancelled, failed, never answered or never transcribed without a barge-in or a client
action to explain it; each is listed with the events the server sent for it, and the
exit status is 1 when there is one.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from engine.bench.clients import BenchRunError, SessionRefused
from engine.bench.server_process import ServerProcess, free_port, server_figures
from engine.bench.spoken_turns import SpokenSession, load_questions, load_run
from engine.bench.turn_ledger import OUTCOMES, TurnOutcome, tally
from engine.errors import ConfigError, run_command

PROG = "parley-cli bench lost-turns"
MAX_CLIENTS = 16
REFUSED_RETRY_S = 30.0  # how long a client retries a refused connection
BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def _progress(text: str) -> None:
    print(f"[bench lost-turns] {text}", file=sys.stderr, flush=True)


@contextmanager
def cpu_burners(count: int, seconds: float) -> Iterator[list[subprocess.Popen]]:
    """``count`` processes that each keep one core busy for at most ``seconds`` (they end
    by themselves; on leaving they are terminated and waited for)."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN.format(seconds=float(seconds))],
                              stdin=subprocess.DEVNULL) for _ in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)


async def play_script(url: str, client: int, repeat: int, rng: random.Random, questions, run,
                      turn_timeout: float) -> dict:
    """One session of the script (see the module doc); its turns' outcomes."""
    session = SpokenSession(url, client, turn_timeout=turn_timeout)
    await session.connect()
    try:
        await session.speak_run(run)
        await session.ask(rng.choice(questions))
        over, question = rng.sample(questions, 2)
        await session.barge_in(over, question, rng.uniform(0.3, 1.5))
    finally:
        await session.close()
    outcomes = session.ledger.outcomes()
    return {"client": client, "repeat": repeat, "spoken": session.spoken, "timeouts": session.timeouts,
            "outcomes": outcomes, "errors": list(session.ledger.errors)}


async def _admitted(play: Callable[[], Awaitable[dict]], within_s: float = REFUSED_RETRY_S) -> dict:
    """``play()``, again while the server refuses the connection (the unit the client's
    previous session held is freed a moment after it closed), for up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await play()
        except SessionRefused as refusal:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(refusal.retry_after_s or 0.5)


async def run_stress(url: str, clients: int, repeats: int, seed: int, turn_timeout: float,
                     progress: Callable[[str], None] | None = None) -> dict:
    """Every client's sessions against the server at ``url``; the report's document."""
    questions = load_questions()
    run, run_turns = load_run()
    sessions: list[dict] = []

    async def client_loop(index: int) -> None:
        rng = random.Random(seed * 100_003 + index)
        for repeat in range(repeats):
            try:
                result = await _admitted(functools.partial(play_script, url, index, repeat, rng,
                                                           questions, run, turn_timeout))
            except BenchRunError as exc:
                result = {"client": index, "repeat": repeat, "spoken": 0, "timeouts": 0,
                          "outcomes": [], "errors": [str(exc)]}
            sessions.append(result)
            if progress is not None:
                counts = tally(result["outcomes"])
                progress(f"client {index} session {repeat + 1}/{repeats}: "
                         + ", ".join(f"{counts[k]} {k}" for k in OUTCOMES)
                         + (f"; errors: {result['errors'][0]}" if result["errors"] else ""))

    t0 = time.monotonic()
    await asyncio.gather(*(client_loop(i) for i in range(clients)))
    outcomes: list[TurnOutcome] = [o for s in sessions for o in s["outcomes"]]
    lost = [{"client": s["client"], "repeat": s["repeat"], **o.as_dict()}
            for s in sessions for o in s["outcomes"] if o.outcome == "lost"]
    counts = tally(outcomes)
    counts["lost_turns"] = lost[:50]
    return {"clients": clients, "repeats": repeats, "seed": seed,
            "script": {"run": run.name, "run_turns": run_turns, "questions": len(questions)},
            "sessions": len(sessions), "session_errors": [e for s in sessions for e in s["errors"]],
            "waits_given_up": sum(s["timeouts"] for s in sessions),
            **counts, "seconds": round(time.monotonic() - t0, 1)}


def format_report(doc: dict) -> str:
    lines = [f"{doc['clients']} clients x {doc['repeats']} sessions (seed {doc['seed']}) against one "
             f"server of {doc['clients']} units, {doc['burners']} CPU burner(s) running",
             f"turns committed: {doc['turns']}: " + ", ".join(f"{doc[k]} {k}" for k in OUTCOMES),
             f"waits given up: {doc['waits_given_up']}; session errors: {len(doc['session_errors'])}"]
    for why, count in doc["lost_why"].items():
        lines.append(f"  lost x{count}: {why}")
    for turn in doc["lost_turns"][:10]:
        lines.append(f"  client {turn['client']} session {turn['repeat'] + 1}: {turn['item_id']} "
                     f"response {turn['response_status']} ({turn['response_reason']}) "
                     f"{turn['ended_after_s']} s after its commit, the next speech "
                     f"{turn['next_speech_after_s']} s after it; transcript {turn['transcript']!r}")
    for error in doc["session_errors"][:5]:
        lines.append(f"  error: {error}")
    clean = doc["lost"] == 0 and not doc["session_errors"]
    lines.append(f"verdict: {'NO LOST TURN' if clean else 'LOST TURNS'} ({doc['seconds']:.0f} s)")
    return "\n".join(lines)


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, conflict_handler="resolve",
        usage="%(prog)s [--clients N] [--repeats N] [--burners N] [--seed N] [--json]\n"
              "       [other options] [engine settings]",
        description="Stress the realtime server for lost turns: three spoken questions, a "
        "question answered, a barge-in, per session; several clients; CPU burners running.")
    group = parser.add_argument_group("benchmark")
    if add_config_flags is not None:
        add_config_flags(parser)
    group.add_argument("--clients", type=int, default=3, metavar="N",
                       help="clients at once, one unit each (default 3)")
    group.add_argument("--repeats", type=int, default=3, metavar="N",
                       help="sessions of the script per client (default 3)")
    group.add_argument("--burners", type=int, default=2, metavar="N",
                       help="processes keeping a core busy during the run (default 2)")
    group.add_argument("--seed", type=int, default=0, metavar="N",
                       help="seed of the questions and barge-in points (default 0)")
    group.add_argument("--turn-timeout", type=float, default=60.0, metavar="S",
                       help="seconds a turn may take to be committed and answered (default 60)")
    group.add_argument("--start-timeout", type=float, default=300.0, metavar="S",
                       help="seconds the server may take to start (default 300)")
    group.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    group.add_argument("-v", "--verbose", action="store_true", help="show the server's output")
    return parser


def check_args(args: argparse.Namespace) -> None:
    if not 1 <= args.clients <= MAX_CLIENTS:
        raise ConfigError(f"--clients must be from 1 to {MAX_CLIENTS}; got {args.clients}")
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be at least 1; got {args.repeats}")
    if not 0 <= args.burners <= 16:
        raise ConfigError(f"--burners must be from 0 to 16; got {args.burners}")
    for flag, value in (("--turn-timeout", args.turn_timeout), ("--start-timeout", args.start_timeout)):
        if not 0 < value < float("inf"):
            raise ConfigError(f"{flag} must be a positive number of seconds; got {value}")


async def stress_server(args: argparse.Namespace, extra: list[str], live: list[ServerProcess]) -> dict:
    server = ServerProcess(args.clients, free_port(), extra, args.verbose)
    live.append(server)
    _progress(f"starting parley-cli serve --num-pipelines {args.clients}")
    await asyncio.to_thread(server.start, args.start_timeout)
    # Bounded: the whole script at its slowest, then the burners end by themselves.
    burn_s = args.repeats * 6 * args.turn_timeout + 60
    with cpu_burners(args.burners, burn_s):
        _progress(f"{args.burners} CPU burner(s) on; {args.clients} clients x {args.repeats} sessions")
        doc = await run_stress(server.ws_url, args.clients, args.repeats, args.seed, args.turn_timeout,
                               _progress)
    doc["burners"] = args.burners
    doc["server_args"] = extra
    doc["server"] = server_figures(server.pid).as_dict()
    if doc["lost"] or doc["session_errors"]:
        doc["server_output_tail"] = server.tail()
    return doc


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench lost-turns ARGS``; exit status 2: bad arguments, 1: a turn was
    lost (or a session failed), 0: none."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def stress() -> int:
        check_args(args)
        from engine.bench.serve import server_args
        from engine.server import require_aiohttp

        extra = server_args(args)
        require_aiohttp()
        live: list[ServerProcess] = []
        try:
            doc = asyncio.run(stress_server(args, extra, live))
        finally:
            for server in live:
                server.stop()
        print(json.dumps(doc, indent=2, ensure_ascii=False) if args.json else format_report(doc))
        return 1 if doc["lost"] or doc["session_errors"] else 0

    return run_command(stress)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
