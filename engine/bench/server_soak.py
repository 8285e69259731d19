"""``parley-cli bench soak --server``: many turns through a real ``parley-cli serve``.

One server of ``--units`` pipeline units and as many clients (``--clients``, by default
one per unit), each playing sessions on fresh connections until ``--turns`` turns were
committed in all. A session is a seeded run of 2 to 6 steps (``engine.bench.spoken_turns``):

- ``ask`` (weight 3): a question, answered and played out;
- ``barge_in`` (weight 1): a question, then another one spoken over its reply (0.3 to 1.5 s
  into its audio): two turns, the first one's reply cut;
- ``drop`` (weight 1): a question, and the client disconnects while speaking it or once
  the reply's audio began; it ends the session.

Questions are streamed at real time (the server's barge-in and playout clock are wall
time). Every committed turn is classified from the server's events (``TurnLedger``):
answered, cut by a barge-in, dropped by the client, or lost; a lost turn fails the soak.

The first ``--warmup`` turns warm the models and caches; then, with every client gone and
every unit free again, the server process is sampled (RSS of it and its children,
threads, open file descriptors: ``server_figures``), and again at the end, once every unit
is free again. The verdict: RSS growth from there to the end at most 1 %, threads and
file descriptors the same, no lost turn. Exit status 1 otherwise; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable

from engine.bench.clients import BenchRunError, SessionRefused
from engine.bench.load import wait_units_free
from engine.bench.server_process import ServerFigures, ServerProcess, free_port, server_figures
from engine.bench.spoken_turns import SpokenSession, load_questions
from engine.bench.turn_ledger import OUTCOMES, TurnOutcome, tally
from engine.errors import ConfigError, run_command

PROG = "parley-cli bench soak --server"
STEPS = ("ask", "barge_in", "drop")
STEP_WEIGHTS = (3, 1, 1)
SESSION_STEPS = (2, 6)
RSS_GROWTH_LIMIT = 0.01
SERVER_DEFAULTS = {"llm.max_new_tokens": 24}  # short replies: more turns per hour
SAMPLE_EVERY_S = 10.0
MIB = 2**20


def _progress(text: str) -> None:
    print(f"[bench soak --server] {text}", file=sys.stderr, flush=True)


class SoakState:
    """What the clients share: the turns committed so far and every session's outcomes."""

    def __init__(self) -> None:
        self.outcomes: list[TurnOutcome] = []
        self.open: dict[int, SpokenSession] = {}  # client -> its session in progress
        self.steps: Counter = Counter()
        self.drops: Counter = Counter()  # speaking | replying
        self.sessions = 0
        self.refused = 0  # connections refused (a unit still being freed): retried
        self.errors: list[str] = []
        self.timeouts = 0

    def committed(self) -> int:
        return len(self.outcomes) + sum(len(s.ledger.committed()) for s in self.open.values())

    def finish(self, client: int, session: SpokenSession) -> None:
        self.open.pop(client, None)
        self.outcomes += session.ledger.outcomes()
        self.timeouts += session.timeouts
        self.sessions += 1


async def play_session(url: str, client: int, rng: random.Random, questions, state: SoakState,
                       target: int, turn_timeout: float) -> None:
    """One session (see the module doc), cut short once ``target`` turns were committed."""
    session = SpokenSession(url, client, turn_timeout=turn_timeout)
    try:
        await session.connect()
    except SessionRefused as refusal:  # the unit a client just left is not free yet
        state.refused += 1
        await asyncio.sleep(refusal.retry_after_s or rng.uniform(0.5, 1.5))
        return
    except BenchRunError as exc:
        state.errors.append(f"connect: {exc}")
        await asyncio.sleep(1.0)
        return
    state.open[client] = session
    try:
        for _ in range(rng.randint(*SESSION_STEPS)):
            if state.committed() >= target:
                break
            step = rng.choices(STEPS, STEP_WEIGHTS)[0]
            state.steps[step] += 1
            if step == "ask":
                await session.ask(rng.choice(questions))
            elif step == "barge_in":
                over, question = rng.sample(questions, 2)
                await session.barge_in(over, question, rng.uniform(0.3, 1.5))
            else:
                state.drops[await session.drop(rng.choice(questions), rng)] += 1
                break
    except BenchRunError as exc:
        state.errors.append(str(exc))
    finally:
        await session.close()
        state.finish(client, session)


async def run_phase(url: str, clients: int, seed: int, questions, state: SoakState, target: int,
                    turn_timeout: float) -> None:
    """Every client plays sessions until ``target`` turns were committed in all."""
    async def client_loop(index: int) -> None:
        rng = random.Random(seed * 100_003 + index)
        while state.committed() < target:
            await play_session(url, index, rng, questions, state, target, turn_timeout)

    await asyncio.gather(*(client_loop(i) for i in range(clients)))


async def _sampler(pid: int, samples: list[list], t0: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            figures = server_figures(pid)
        except BenchRunError:
            return
        samples.append([round(time.monotonic() - t0, 1), figures.rss, figures.threads, figures.fds])
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)
        except TimeoutError:
            pass


async def _idle_figures(server: ServerProcess) -> ServerFigures:
    """The server's figures once every unit is free (every client left)."""
    await wait_units_free(server.pool_url)
    await asyncio.sleep(1.0)  # a freed unit's stage threads are joined just after
    return server_figures(server.pid)


async def run_server_soak(server: ServerProcess, args: argparse.Namespace,
                          progress: Callable[[str], None] = _progress) -> dict:
    """Warm-up, then the soak, against a started ``server``; the report's document."""
    questions = load_questions()
    state = SoakState()
    t0 = time.monotonic()
    start = server_figures(server.pid)
    progress(f"warm-up: {args.warmup} turns over {args.clients} clients...")
    await run_phase(server.ws_url, args.clients, args.seed, questions, state, args.warmup,
                    args.turn_timeout)
    base = await _idle_figures(server)
    warm_turns = len(state.outcomes)
    progress(f"after warm-up ({warm_turns} turns, {time.monotonic() - t0:.0f} s): "
             f"RSS {base.rss / MIB:.1f} MiB, {base.threads} threads, {base.fds} fds")
    samples: list[list] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sampler(server.pid, samples, t0, stop))
    t_soak = time.monotonic()

    async def report() -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 60.0)
            except TimeoutError:
                counts = tally(state.outcomes)
                progress(f"{state.committed()}/{args.turns} turns, "
                         + ", ".join(f"{counts[k]} {k}" for k in OUTCOMES)
                         + (f", RSS {samples[-1][1] / MIB:.1f} MiB" if samples else ""))

    printer = asyncio.create_task(report())
    try:
        await run_phase(server.ws_url, args.clients, args.seed + 1, questions, state, args.turns,
                        args.turn_timeout)
    finally:
        stop.set()
        await asyncio.gather(sampler, printer, return_exceptions=True)
    soak_s = time.monotonic() - t_soak
    end = await _idle_figures(server)
    counts = tally(state.outcomes)
    growth = (end.rss - base.rss) / base.rss if base.rss else None
    during = samples + [[None, base.rss, base.threads, base.fds], [None, end.rss, end.threads, end.fds]]
    soak_turns = len(state.outcomes) - warm_turns
    return {
        "mode": "server", "units": args.server_units, "clients": args.clients, "seed": args.seed,
        "target_turns": args.turns, "warmup_turns": warm_turns, "sessions": state.sessions,
        "refused_connections": state.refused,
        "steps": {s: state.steps[s] for s in STEPS},
        "dropped_while": {w: state.drops[w] for w in ("speaking", "replying")},
        **counts,
        "waits_given_up": state.timeouts, "session_errors": state.errors[:20],
        "session_errors_total": len(state.errors),
        "server": {
            "source": "psutil on the serve process (RSS: it and its children)",
            "start": start.as_dict(), "after_warmup": base.as_dict(), "end": end.as_dict(),
            "rss_growth": None if growth is None else round(growth, 5),
            "rss_growth_limit": RSS_GROWTH_LIMIT,
            "rss_within_limit": growth is not None and growth <= RSS_GROWTH_LIMIT,
            "threads_flat": base.threads == end.threads, "fds_flat": base.fds == end.fds,
            "threads_range": _range([s[2] for s in during]), "fds_range": _range([s[3] for s in during]),
            "rss_peak_bytes": max(s[1] for s in during),
            "samples": samples,  # [seconds since the start, rss, threads, fds]
        },
        "soak_s": round(soak_s, 1), "wall_s": round(time.monotonic() - t0, 1),
        "seconds_per_turn": round(soak_s / soak_turns, 2) if soak_turns else None,
    }


def _range(values: list[int]) -> dict:
    return {"min": min(values), "max": max(values)} if values else {"min": None, "max": None}


def passed(doc: dict) -> bool:
    """The soak's verdict: no lost turn, no failed session, RSS, threads and fds flat."""
    server = doc["server"]
    return (doc["lost"] == 0 and doc["session_errors_total"] == 0 and server["rss_within_limit"]
            and server["threads_flat"] and server["fds_flat"])


def format_report(doc: dict) -> str:
    server = doc["server"]
    base, end = server["after_warmup"], server["end"]
    lines = [
        f"soak through parley-cli serve: {doc['units']} units, {doc['clients']} clients, seed "
        f"{doc['seed']}; {doc['sessions']} sessions ({doc['refused_connections']} connections "
        f"refused and retried), steps " + ", ".join(
            f"{k} {v}" for k, v in doc["steps"].items())
        + f"; dropped while speaking {doc['dropped_while']['speaking']}, while the reply played "
          f"{doc['dropped_while']['replying']}",
        f"turns committed: {doc['turns']} ({doc['warmup_turns']} in the warm-up): "
        + ", ".join(f"{doc[k]} {k}" for k in OUTCOMES),
    ]
    for why, count in doc["lost_why"].items():
        lines.append(f"  lost x{count}: {why}")
    if doc["session_errors_total"]:
        lines.append(f"  failed sessions: {doc['session_errors_total']} (first: {doc['session_errors'][0]})")
    verdict = "within" if server["rss_within_limit"] else "OVER"
    growth = server["rss_growth"]
    lines += [
        f"server RSS after warm-up {base['rss_bytes'] / MIB:.1f} MiB, at the end "
        f"{end['rss_bytes'] / MIB:.1f} MiB ({(growth or 0) * 100:+.2f} %, {verdict} the "
        f"{server['rss_growth_limit'] * 100:.0f} % limit); peak {server['rss_peak_bytes'] / MIB:.1f} MiB",
        f"threads after warm-up {base['threads']}, at the end {end['threads']}"
        f"{' (flat)' if server['threads_flat'] else ' (NOT flat)'}, during "
        f"{server['threads_range']['min']}..{server['threads_range']['max']}; open fds "
        f"{base['fds']} -> {end['fds']}{' (flat)' if server['fds_flat'] else ' (NOT flat)'}, during "
        f"{server['fds_range']['min']}..{server['fds_range']['max']}",
        f"soak {doc['soak_s']:.0f} s ({doc['seconds_per_turn']} s per turn), wall {doc['wall_s']:.0f} s; "
        f"verdict: {'PASS' if passed(doc) else 'FAIL'}",
    ]
    return "\n".join(lines)


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, conflict_handler="resolve",
        usage="%(prog)s [--units N] [--clients N] [--turns N] [--warmup N] [--seed N] [--json]\n"
              "       [other options] [engine settings]",
        description="Soak the realtime server: many spoken turns (with barge-ins and "
        "disconnects) from several clients through one parley-cli serve, sampling its RSS, "
        "threads and open files after a warm-up and at the end.")
    group = parser.add_argument_group("benchmark")
    if add_config_flags is not None:
        add_config_flags(parser)
    group.add_argument("--server", action="store_true", required=True,
                       help="soak through a parley-cli serve process (this mode)")
    # Not ``units``: that is the engine setting, which ``serve`` takes as --num-pipelines.
    group.add_argument("--units", dest="server_units", type=int, default=4, metavar="N",
                       help="pipeline units of the server (default 4)")
    group.add_argument("--clients", type=int, metavar="N", help="clients at once (default: --units)")
    group.add_argument("--turns", type=int, default=2000, metavar="N",
                       help="turns to commit in all, warm-up included (default 2000)")
    group.add_argument("--warmup", type=int, metavar="N",
                       help="turns before the baseline sample (default: 5%% of --turns, 8 to 100)")
    group.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the sessions (default 0)")
    group.add_argument("--turn-timeout", type=float, default=60.0, metavar="S",
                       help="seconds a turn may take to be committed and answered (default 60)")
    group.add_argument("--start-timeout", type=float, default=300.0, metavar="S",
                       help="seconds the server may take to start (default 300)")
    group.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    group.add_argument("-v", "--verbose", action="store_true", help="show the server's output")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Fill in the defaults and check; ConfigError naming the flag."""
    if not 1 <= args.server_units <= 64:
        raise ConfigError(f"--units must be from 1 to 64; got {args.server_units}")
    args.clients = args.server_units if args.clients is None else args.clients
    if not 1 <= args.clients <= 256:
        raise ConfigError(f"--clients must be from 1 to 256; got {args.clients}")
    if args.turns < 2:
        raise ConfigError(f"--turns must be at least 2; got {args.turns}")
    if args.warmup is None:
        args.warmup = min(100, max(8, args.turns // 20))
    if not 1 <= args.warmup < args.turns:
        raise ConfigError(f"--warmup must be from 1 to --turns - 1 ({args.turns - 1}); got {args.warmup}")
    for flag, value in (("--turn-timeout", args.turn_timeout), ("--start-timeout", args.start_timeout)):
        if not 0 < value < float("inf"):
            raise ConfigError(f"{flag} must be a positive number of seconds; got {value}")


def server_flags(args: argparse.Namespace) -> list[str]:
    """The engine flags for ``serve``: the soak's defaults unless given, then those given."""
    from engine.bench.serve import server_args

    extra = server_args(args)
    for dotted, value in SERVER_DEFAULTS.items():
        flag = "--" + dotted.replace(".", "-").replace("_", "-")
        if getattr(args, dotted, None) is None:
            extra += [flag, str(value)]
    return extra


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench soak --server ARGS``; exit status 2: bad arguments, 1: a turn
    lost, a session failed or a figure not flat, 0: passed."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def soak() -> int:
        check_args(args)
        extra = server_flags(args)
        from engine.server import require_aiohttp

        require_aiohttp()
        server = ServerProcess(args.server_units, free_port(), extra, args.verbose)
        try:
            _progress(f"starting parley-cli serve --num-pipelines {args.server_units} {' '.join(extra)}")
            server.start(args.start_timeout)
            doc = asyncio.run(run_server_soak(server, args))
        finally:
            server.stop()
        doc["server_args"] = extra
        print(json.dumps(doc, indent=2, ensure_ascii=False) if args.json else format_report(doc))
        return 0 if passed(doc) else 1

    return run_command(soak)
