"""``parley-cli bench serve``: the realtime server's memory per unit and latency under load.

Two measurements, each against real ``parley-cli serve`` processes on loopback ports:

- **Memory.** For each N of ``--units`` a fresh server with N pipeline units: its RSS
  (the process and any children, read with psutil) once it says it is serving, and again
  after N clients at once have each had one turn (``--memory-input``, by default the
  2.7 s one_two_three_44k.wav, streamed at real time with 1.5 s of silence after it), with
  every unit still held. Both are given as a ratio to the smallest N. Parley loads one set
  of models for all units, so the ratio should stay near 1.
- **Latency.** One server with max(``--clients``) units (the memory server of that size
  when there is one, after its memory samples). After one warm-up turn, for each run and
  each C of ``--clients``, C clients at once stream ``--input`` (jfk.flac) at real time
  with 1.5 s of silence after it; each client's voice-to-voice is measured on its own
  clock (``engine.bench.clients``: the first reply audio minus the moment the chunk
  holding the last speech sample was sent, the end of speech being where the server's
  VAD put it). p50/p95/min/max per C.

- **Load** (``--load``, instead of both). One server with ``--pipelines`` units and
  ``--clients`` clients (more than units) for ``--duration`` seconds: they connect, are
  refused and retry (honouring ``Retry-After``), stream speech at real time, barge in,
  drop mid-turn and reconnect; admitted / refused / answered counts, voice-to-voice and
  the server's RSS from start to end (``engine.bench.load``).

Each client has its own connection, and so its own fresh unit, per turn. The server's
settings are the engine flags given here (passed through to ``serve``); the environment
(``HF_HUB_OFFLINE``, ``PARLEY_CACHE_DIR``...) is the caller's.

``engine.cli`` dispatches ``bench serve`` here before its own parser runs (``bench
INPUT`` is unchanged) and hands over ``add_config_flags``, so this module never imports
the command line back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.bench.clients import (CHUNK_S, SILENCE_TAIL_S, BenchRunError, TurnResult, Utterance,
                                  latency_summary)
from engine.bench.realtime_client import RealtimeClient, concurrent_turns, get_json
from engine.bench.load import LoadPlan, format_load_report, run_load
from engine.bench.server_process import ServerProcess, free_port
from engine.errors import ConfigError, run_command

PROG = "parley-cli bench serve"
MAX_UNITS = 64  # what ``serve --num-pipelines`` accepts
RSS_TARGET = 1.2  # the bar: N units at most 1.2x the RSS of one
AUDIO_DIR = Path(__file__).resolve().parents[2] / "resources" / "audio"
DEFAULT_INPUT = "resources/audio/jfk.flac"
DEFAULT_MEMORY_INPUT = "resources/audio/one_two_three_44k.wav"
MIB = 1024 * 1024
CLIENT_LIBRARIES = ("aiohttp", "openai")
DEFAULTS = {"unit_counts": "1,2,4,8", "clients": "1,2,4", "runs": 3,
            "memory_input": DEFAULT_MEMORY_INPUT}  # of the memory and latency measurements
LOAD_DEFAULTS = {"clients": "16", "pipelines": 4, "duration": 180.0, "seed": 0, "retry_s": 1.0,
                 "barge_input": DEFAULT_MEMORY_INPUT}
LATENCY_ONLY = {"unit_counts": "--units", "runs": "--runs", "memory_input": "--memory-input",
                "client_library": "--client-library"}
LOAD_ONLY = {"pipelines": "--pipelines", "duration": "--duration", "seed": "--seed",
             "retry_s": "--retry-s", "barge_input": "--barge-input"}


def _progress(text: str) -> None:
    print(f"[bench serve] {text}", file=sys.stderr, flush=True)


# -- arguments -------------------------------------------------------------------------

def parse_counts(flag: str, text: str, upper: int = MAX_UNITS) -> list[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8] (ascending); a ConfigError naming ``flag`` for an
    empty list, a word that is not a whole number, a count out of 1..``upper`` or one
    given twice."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ConfigError(f"{flag} {text!r}: expected a comma-separated list of counts, e.g. 1,2,4")
    counts = []
    for item in items:
        try:
            count = int(item)
        except ValueError:
            raise ConfigError(f"{flag} {text!r}: {item!r} is not a whole number") from None
        if not 1 <= count <= upper:
            raise ConfigError(f"{flag} {text!r}: {count} is out of range; each count must be "
                              f"from 1 to {upper}")
        if count in counts:
            raise ConfigError(f"{flag} {text!r}: {count} is given twice")
        counts.append(count)
    return sorted(counts)


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    """The options of ``bench serve``, then the engine settings passed through to ``serve``
    (all but the engine's ``--units``: here it is the list of server sizes, and a server's
    size is its ``--num-pipelines``)."""
    parser = argparse.ArgumentParser(
        prog=PROG, conflict_handler="resolve",
        usage="%(prog)s [--units N,N,...] [--clients C,C,...] [--input AUDIO] [--runs N] [--json]\n"
              "       [--port-base P] [other options] [engine settings]\n"
              "       %(prog)s --load [--clients C] [--pipelines N] [--duration S] [--seed N] [--json]\n"
              "       [other options] [engine settings]",
        description="Benchmark the realtime server (parley-cli serve): RSS with 1..N "
        "pipeline units, and voice-to-voice latency with concurrent clients; or, with --load, "
        "more clients than units for a while (refusals, barge-ins, drops, RSS over time).")
    group = parser.add_argument_group("benchmark")
    if add_config_flags is not None:
        add_config_flags(parser)
    group.add_argument("--units", dest="unit_counts", metavar="N,N,...",
                       help="pipeline units per server for the memory measurement (default 1,2,4,8)")
    group.add_argument("--clients", metavar="C,C,...",
                       help="concurrent clients for the latency measurement (default 1,2,4); "
                            "with --load one count (default 16)")
    group.add_argument("--input", default=DEFAULT_INPUT, metavar="AUDIO",
                       help=f"recording the latency clients stream (default {DEFAULT_INPUT})")
    group.add_argument("--memory-input", metavar="AUDIO",
                       help="recording of the one turn per unit of the memory measurement "
                            f"(default {DEFAULT_MEMORY_INPUT})")
    group.add_argument("--runs", type=int, metavar="N",
                       help="latency runs per client count (default 3)")
    load = parser.add_argument_group("load (--load)")
    load.add_argument("--load", action="store_true",
                      help="the load run instead of the memory and latency measurements")
    load.add_argument("--pipelines", type=int, metavar="N",
                      help="pipeline units of the one server (default 4)")
    load.add_argument("--duration", type=float, metavar="S",
                      help="seconds new sessions may start for (default 180)")
    load.add_argument("--seed", type=int, metavar="N",
                      help="seed of the clients' choices: session kinds, drop points (default 0)")
    load.add_argument("--retry-s", type=float, metavar="S",
                      help="seconds a refused client waits when the server sent no Retry-After "
                           "(default 1, with +-50%% jitter)")
    load.add_argument("--barge-input", metavar="AUDIO",
                      help="recording a barge-in speaks over the reply (and the warm-up turn) "
                           f"(default {DEFAULT_MEMORY_INPUT})")
    group.add_argument("--client-library", choices=CLIENT_LIBRARIES, metavar="{aiohttp,openai}",
                       help="what the memory and latency clients speak the protocol with: "
                            "aiohttp (default), or the official openai library unmodified "
                            "(AsyncOpenAI().realtime.connect; pip install openai)")
    group.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    group.add_argument("--port-base", type=int, metavar="P",
                       help="serve on ports P, P+1, ... (default: free ports the system picks)")
    group.add_argument("--start-timeout", type=float, default=300.0, metavar="S",
                       help="seconds a server may take to start (default 300)")
    group.add_argument("--turn-timeout", type=float, default=120.0, metavar="S",
                       help="seconds a reply may take after the recording was sent (default 120)")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="show the servers' own output on stderr")
    return parser


@dataclass(frozen=True)
class Plan:
    """A checked command line: nothing here can fail once servers start."""

    units: list[int]
    clients: list[int]
    runs: int
    speech: Utterance  # the latency recording
    memory_speech: Utterance  # the memory turn's recording
    server_args: list[str]  # engine flags passed through to ``serve``
    port_base: int | None = None
    start_timeout: float = 300.0
    turn_timeout: float = 120.0
    verbose: bool = False
    argv: list[str] = field(default_factory=list)
    client_library: str = "aiohttp"

    @property
    def client_type(self) -> type[RealtimeClient]:
        """The client class ``--client-library`` names."""
        if self.client_library == "openai":
            from engine.bench.openai_client import OpenAIRealtimeClient

            return OpenAIRealtimeClient
        return RealtimeClient

    @property
    def latency_units(self) -> int:
        return max(self.clients)

    @property
    def servers(self) -> list[int]:
        """The unit count of each server, in the order they start."""
        extra = [] if self.latency_units in self.units else [self.latency_units]
        return self.units + extra


def _audio_path(given: str, default: str) -> Path:
    """A recording named on the command line; the defaults are found in the checkout."""
    if given == default and not Path(given).exists():
        return AUDIO_DIR / Path(default).name
    return Path(given)


def server_args(args: argparse.Namespace) -> list[str]:
    """The engine flags given to ``bench serve``, as ``serve`` takes them; the config they
    make is checked here first (a bad value is a ConfigError before anything starts)."""
    from engine.config import EngineConfig, config_fields, load_config

    out: list[str] = []
    overrides = {}
    if getattr(args, "config", None):
        out += ["--config", args.config]
    for dotted, _field, _tp in config_fields():
        value = getattr(args, dotted, None)
        if value is not None:
            overrides[dotted] = value
            out += ["--" + dotted.replace(".", "-").replace("_", "-"), str(value)]
    base = load_config(args.config) if getattr(args, "config", None) else EngineConfig()
    base.with_overrides(overrides)
    return out


def _given(args: argparse.Namespace, flags: dict[str, str]) -> list[str]:
    return [flag for dest, flag in flags.items() if getattr(args, dest) is not None]


def make_plan(args: argparse.Namespace, argv: list[str] | None = None) -> Plan:
    """Check every argument and read both recordings; ConfigError / AudioInputError
    (exit status 2) for anything wrong, before any server starts."""
    if _given(args, LOAD_ONLY):
        raise ConfigError(f"{', '.join(_given(args, LOAD_ONLY))}: only with --load")
    for dest, default in DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    units = parse_counts("--units", args.unit_counts)
    clients = parse_counts("--clients", args.clients)
    if args.runs < 1:
        raise ConfigError(f"--runs must be at least 1; got {args.runs}")
    for flag, value in (("--start-timeout", args.start_timeout), ("--turn-timeout", args.turn_timeout)):
        if not value > 0:
            raise ConfigError(f"{flag} must be a positive number of seconds; got {value}")
    servers = len(units) + (0 if max(clients) in units else 1)
    if args.port_base is not None and not 1024 <= args.port_base <= 65535 - servers + 1:
        raise ConfigError(f"--port-base must be from 1024 to {65535 - servers + 1} "
                          f"({servers} server(s) use consecutive ports); got {args.port_base}")
    extra = server_args(args)
    from engine.server import require_aiohttp

    require_aiohttp()
    speech = Utterance.load(_audio_path(args.input, DEFAULT_INPUT))
    memory_speech = Utterance.load(_audio_path(args.memory_input, DEFAULT_MEMORY_INPUT))
    if args.client_library == "openai":
        from engine.bench.openai_client import require_openai_client

        require_openai_client()
    return Plan(units, clients, args.runs, speech, memory_speech, extra, args.port_base,
                args.start_timeout, args.turn_timeout, args.verbose, list(argv or []),
                args.client_library or "aiohttp")


def make_load_plan(args: argparse.Namespace) -> LoadPlan:
    """``--load``'s arguments checked and its recordings read; ConfigError (exit status 2)
    naming the flag for anything wrong, before the server starts."""
    if _given(args, LATENCY_ONLY):
        raise ConfigError(f"{', '.join(_given(args, LATENCY_ONLY))}: not used with --load "
                          "(it runs one server of --pipelines units)")
    for dest, default in LOAD_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    clients = parse_counts("--clients", args.clients, upper=1024)
    if len(clients) != 1:
        raise ConfigError(f"--clients {args.clients!r}: --load takes one count of clients")
    if not 1 <= args.pipelines <= MAX_UNITS:
        raise ConfigError(f"--pipelines must be from 1 to {MAX_UNITS}; got {args.pipelines}")
    for flag, value in (("--duration", args.duration), ("--retry-s", args.retry_s),
                        ("--start-timeout", args.start_timeout), ("--turn-timeout", args.turn_timeout)):
        if not 0 < value < float("inf"):
            raise ConfigError(f"{flag} must be a positive number of seconds; got {value}")
    if args.port_base is not None and not 1024 <= args.port_base <= 65535:
        raise ConfigError(f"--port-base must be from 1024 to 65535; got {args.port_base}")
    from engine.server import require_aiohttp

    require_aiohttp()
    speech = Utterance.load(_audio_path(args.input, DEFAULT_INPUT))
    barge = Utterance.load(_audio_path(args.barge_input, DEFAULT_MEMORY_INPUT))
    return LoadPlan(clients[0], args.pipelines, args.duration, speech, barge, args.seed, args.retry_s,
                    args.turn_timeout)


# -- the measurements ------------------------------------------------------------------

def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 3) if base else None


def _ms(values: list[float]) -> str:
    return ", ".join(f"{v * 1000:.0f} ms" for v in values)


async def _wait_free(server: ServerProcess, count: int, timeout: float = 30.0) -> None:
    """Until the server's pool has ``count`` free units (a unit a client left is stopped
    and freed shortly after the socket closes)."""
    deadline = time.monotonic() + timeout
    while True:
        units = (await get_json(server.pool_url)).get("units") or []
        free = sum(1 for u in units if isinstance(u, dict) and u.get("state", "free") == "free")
        if free >= count or not units:
            return
        if time.monotonic() > deadline:
            raise BenchRunError(f"the server still has only {free} free unit(s) of {len(units)} "
                                f"{timeout:.0f} s after the clients left")
        await asyncio.sleep(0.1)


async def _memory(plan: Plan, server: ServerProcess, startup_s: float) -> dict:
    startup_rss = server.rss()
    pool = await get_json(server.pool_url)
    _progress(f"{server.units} unit(s): serving after {startup_s:.1f} s, "
              f"RSS {startup_rss / MIB:.0f} MiB; one turn per unit...")
    held: dict[str, int] = {}
    await _wait_free(server, server.units)

    def sample() -> None:
        held["rss"] = server.rss()

    turns = await concurrent_turns(server.ws_url, plan.memory_speech, server.units, plan.turn_timeout,
                                   before_close=sample, client_type=plan.client_type)
    _progress(f"{server.units} unit(s): after one turn each RSS {held['rss'] / MIB:.0f} MiB "
              f"(voice-to-voice {_ms([t.voice_to_voice_s for t in turns])})")
    models = pool.get("models") or []
    return {"units": server.units, "startup_rss_bytes": startup_rss, "turn_rss_bytes": held["rss"],
            "startup_s": round(startup_s, 1),
            "pool_rss_bytes": pool.get("rss_bytes"), "models": models,
            "turns": [t.as_dict() for t in turns]}


async def _latency(plan: Plan, server: ServerProcess) -> dict:
    _progress(f"latency on the server with {server.units} unit(s): one warm-up turn...")
    await _wait_free(server, server.units)
    warmup = await concurrent_turns(server.ws_url, plan.memory_speech, 1, plan.turn_timeout,
                                    client_type=plan.client_type)
    runs: dict[int, list[list[TurnResult]]] = {c: [] for c in plan.clients}
    for run in range(plan.runs):
        for count in plan.clients:  # interleaved, so a drift in the machine's speed hits all
            await _wait_free(server, count)
            results = await concurrent_turns(server.ws_url, plan.speech, count, plan.turn_timeout,
                                             client_type=plan.client_type)
            runs[count].append(results)
            _progress(f"run {run + 1}/{plan.runs}, {count} client(s): voice-to-voice "
                      f"{_ms([t.voice_to_voice_s for t in results])}")
    rows = []
    base = None
    for count in plan.clients:
        values = [t.voice_to_voice_s for run in runs[count] for t in run]
        summary = latency_summary(values)
        if base is None:
            base = summary["p50_s"]
        rows.append({"clients": count, **summary, "p50_ratio": _ratio(summary["p50_s"], base),
                     "runs": [[t.as_dict() for t in run] for run in runs[count]]})
    sources = sorted({t.speech_end_source for c in plan.clients for run in runs[c] for t in run})
    return {"input": plan.speech.name, "server_units": server.units, "runs": plan.runs,
            "speech_end_sources": sources, "warmup": warmup[0].as_dict(), "rows": rows}


def _port(plan: Plan, index: int) -> int:
    return plan.port_base + index if plan.port_base is not None else free_port()


async def run_plan(plan: Plan, live: list[ServerProcess] | None = None) -> dict:
    """Every server in turn; the JSON document of ``--json``. Each server is put in
    ``live`` while it runs, so a caller interrupted midway can stop it."""
    live = [] if live is None else live
    t0 = time.monotonic()
    memory_rows: list[dict] = []
    latency: dict | None = None
    for index, units in enumerate(plan.servers):
        server = ServerProcess(units, _port(plan, index), plan.server_args, plan.verbose)
        live.append(server)
        _progress(f"starting parley-cli serve --num-pipelines {units} on port {server.port}")
        started = time.monotonic()
        try:
            await asyncio.to_thread(server.start, plan.start_timeout)
            if units in plan.units:
                memory_rows.append(await _memory(plan, server, time.monotonic() - started))
            if units == plan.latency_units:
                latency = await _latency(plan, server)
        finally:
            await asyncio.to_thread(server.stop)
    base = memory_rows[0]
    for row in memory_rows:
        row["startup_ratio"] = _ratio(row["startup_rss_bytes"], base["startup_rss_bytes"])
        row["turn_ratio"] = _ratio(row["turn_rss_bytes"], base["turn_rss_bytes"])
    top = memory_rows[-1]
    return {
        "command": " ".join([PROG, *plan.argv]),
        "server_args": plan.server_args,
        "chunk_s": CHUNK_S, "silence_tail_s": SILENCE_TAIL_S,
        "client_library": plan.client_library,
        "voice_to_voice": "first response.output_audio.delta received minus the time the client "
                          "sent the chunk holding the last speech sample: the server's last "
                          "speech_stopped.audio_end_ms, else (speech_end_source 'energy') the last "
                          "20 ms frame of the recording within 30 dB of the loudest",
        "memory": {"input": plan.memory_speech.name, "rss": "psutil RSS of the server process "
                   "and its children", "rows": memory_rows,
                   "max_vs_min": {"units": [base["units"], top["units"]],
                                  "startup_ratio": top["startup_ratio"], "turn_ratio": top["turn_ratio"],
                                  "target": RSS_TARGET,
                                  "within_target": bool(top["turn_ratio"] is not None
                                                        and top["startup_ratio"] <= RSS_TARGET
                                                        and top["turn_ratio"] <= RSS_TARGET)}},
        "latency": latency,
        "wall_s": round(time.monotonic() - t0, 1),
    }


async def run_load_server(plan: LoadPlan, args: argparse.Namespace, argv: list[str],
                          live: list[ServerProcess]) -> dict:
    """``--load``: one server of ``plan.pipelines`` units, the load run against it, and the
    process tree's RSS (psutil) beside the pool's; the JSON document of ``--json``."""
    extra = server_args(args)
    port = args.port_base if args.port_base is not None else free_port()
    server = ServerProcess(plan.pipelines, port, extra, args.verbose)
    live.append(server)
    _progress(f"starting parley-cli serve --num-pipelines {plan.pipelines} on port {port}")
    started = time.monotonic()
    try:
        await asyncio.to_thread(server.start, args.start_timeout)
        startup_s = time.monotonic() - started
        rss_start = server.rss()
        doc = await run_load(server.ws_url, server.pool_url, plan, _progress)
        doc["rss"]["process_tree_start_bytes"] = rss_start
        doc["rss"]["process_tree_end_bytes"] = server.rss()
    finally:
        await asyncio.to_thread(server.stop)
    return {"command": " ".join([PROG, *argv]), "server_args": extra, "startup_s": round(startup_s, 1),
            "chunk_s": CHUNK_S, "silence_tail_s": SILENCE_TAIL_S, **doc}


# -- output ----------------------------------------------------------------------------

def _stack(models: list[dict]) -> str:
    parts = [f"{m.get('stage')} {Path(str(m.get('model'))).name} ({m.get('device')})" for m in models]
    return ", ".join(parts) if parts else "(the server listed no models)"


def format_report(doc: dict) -> str:
    """The tables of a ``run_plan`` document, for the terminal."""
    memory, latency = doc["memory"], doc["latency"]
    rows = memory["rows"]
    base_units = rows[0]["units"]
    lines = [f"models: {_stack(rows[0].get('models') or [])}", "",
             "memory: RSS of parley-cli serve and its children (MiB); \"after 1 turn/unit\": "
             f"{Path(memory['input']).name}",
             "from every unit's client at once, sampled while the units are still held",
             f"{'units':>5}  {'after start-up':>14}  {f'x {base_units} unit':>8}  "
             f"{'after 1 turn/unit':>17}  {f'x {base_units} unit':>8}"]
    for row in rows:
        lines.append(f"{row['units']:>5}  {row['startup_rss_bytes'] / MIB:>14.1f}  "
                     f"{row['startup_ratio']:>8.3f}  {row['turn_rss_bytes'] / MIB:>17.1f}  "
                     f"{row['turn_ratio']:>8.3f}")
    top = memory["max_vs_min"]
    if top["units"][0] != top["units"][1]:
        verdict = "within" if top["within_target"] else "OVER"
        lines.append(f"{top['units'][1]} units vs {top['units'][0]}: {top['startup_ratio']:.2f}x after "
                     f"start-up, {top['turn_ratio']:.2f}x after one turn per unit "
                     f"({verdict} the {top['target']}x target)")
    if latency is not None:
        base_clients = latency["rows"][0]["clients"]
        where = {"server_vad": "the server's VAD", "energy": "an energy threshold"}
        ends = " / ".join(where.get(str(s), str(s)) for s in latency.get("speech_end_sources", []))
        lines += ["", f"voice-to-voice: first reply audio minus the end of speech (found by {ends}), "
                  "on the client's clock;",
                  f"each client streams {Path(latency['input']).name} at real time + "
                  f"{doc['silence_tail_s']} s silence ({doc['client_library']} "
                  f"client); server with {latency['server_units']} units; "
                  f"{latency['runs']} run(s)",
                  f"{'clients':>7}  {'n':>3}  {'p50':>8}  {'p95':>8}  {'min':>8}  {'max':>8}  "
                  f"{f'p50 x {base_clients}':>9}"]
        for row in latency["rows"]:
            cells = "  ".join(f"{row[k] * 1000:>5.0f} ms" for k in ("p50_s", "p95_s", "min_s", "max_s"))
            lines.append(f"{row['clients']:>7}  {row['n']:>3}  {cells}  {row['p50_ratio']:>9.2f}")
    lines += ["", f"wall time {doc['wall_s']:.0f} s"]
    return "\n".join(lines)


# -- entry point -----------------------------------------------------------------------

def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench serve ARGS``; returns the exit status (2: bad arguments, 1: the
    benchmark failed, 0: measured)."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def measure() -> int:
        live: list[ServerProcess] = []
        try:
            if args.load:
                doc = asyncio.run(run_load_server(make_load_plan(args), args, argv, live))
            else:
                doc = asyncio.run(run_plan(make_plan(args, argv), live))
        finally:
            for server in live:  # stopped already unless interrupted; stop() is idempotent
                server.stop()
        if args.json:
            print(json.dumps(doc, indent=2, ensure_ascii=False))
        else:
            print(format_load_report(doc) if args.load else format_report(doc))
        return 0

    return run_command(measure)
