"""``parley-cli bench serve --load``: more clients than units against one server, for a while.

Each of ``clients`` clients loops until ``duration_s`` has passed: it connects; if the
server is full it counts a refusal, waits (the ``Retry-After`` of an HTTP 503 when the
server sent one, else ``retry_s`` with jitter) and tries again; if it is admitted it
plays one session, chosen by a seeded generator, then disconnects and starts over:

- ``turn``: the recording (jfk.flac) streamed at real time; the reply is waited for
  and its voice-to-voice measured (``engine.bench.clients``).
- ``barge_in``: the same, but as soon as the reply's audio starts a second, shorter
  recording is streamed over it (the user speaks over the reply). The first reply is
  ``cut`` when the server cancelled it, ``too_late`` when it had finished anyway; the
  reply to the second recording is the one measured.
- ``drop``: the client disconnects mid-turn, while it is still speaking or once the
  reply's audio has started.

Every connection is admitted, refused or a connect error; every admitted session ends
answered, dropped or failed (a server error, a timeout, a closed socket: counted by
reason). The server's RSS (``GET /v1/pool``'s ``rss_bytes``) is read before the run,
after one warm-up turn, every few seconds during it and at the end, once every unit is
free again (how many are is reported: a unit still held then has leaked).

No new session starts after ``duration_s``; those under way finish (each is bounded by
the turn timeout). ``run_load`` takes the server's URLs, so the tests can point it at a
fake server; ``engine.bench.serve`` starts the real one.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.bench.clients import (BenchRunError, SessionRefused, TurnResult, Utterance, latency_summary,
                                  speech_end_time)
from engine.bench.realtime_client import RealtimeClient, get_json

SCENARIOS = ("turn", "barge_in", "drop")
SCENARIO_WEIGHTS = (2, 1, 1)
LEAD_S = 0.05  # from connected to the first chunk's capture
SAMPLE_EVERY_S = 5.0  # RSS samples during the run
FREE_TIMEOUT_S = 30.0  # how long the units may take to be freed once every client left
MIB = 1024 * 1024


@dataclass(frozen=True)
class LoadPlan:
    """A checked ``--load`` command line."""

    clients: int
    pipelines: int
    duration_s: float
    speech: Utterance  # each session's first recording
    barge_speech: Utterance  # what a barge-in says over the reply
    seed: int = 0
    retry_s: float = 1.0  # the wait after a refusal without Retry-After
    turn_timeout: float = 120.0
    connect_timeout: float = 30.0


@dataclass(frozen=True)
class Attempt:
    """One connection attempt: ``t`` seconds after the load started."""

    client: int
    t: float
    outcome: str  # admitted | refused | connect_error
    how: str | None = None  # for a refusal: http_503 | session_limit_reached
    retry_after_s: float | None = None


@dataclass
class LoadStats:
    """What the clients saw; ``as_dict`` is the report's counts."""

    attempts: list[Attempt] = field(default_factory=list)
    sessions: Counter = field(default_factory=Counter)  # scenario -> admitted sessions
    outcomes: Counter = field(default_factory=Counter)  # answered | dropped | failed
    dropped_while: Counter = field(default_factory=Counter)  # speaking | replying
    barge_ins: Counter = field(default_factory=Counter)  # cut | too_late
    failures: Counter = field(default_factory=Counter)  # reason -> sessions
    answers: list[tuple[str, TurnResult]] = field(default_factory=list)  # (scenario, result)
    retry_after_waited_s: float = 0.0

    def count(self, outcome: str) -> int:
        return sum(1 for a in self.attempts if a.outcome == outcome)

    def as_dict(self) -> dict:
        refused_by = Counter(a.how for a in self.attempts if a.outcome == "refused")
        v2v = [r.voice_to_voice_s for _s, r in self.answers]
        return {
            "connections": len(self.attempts), "admitted": self.count("admitted"),
            "refused": self.count("refused"), "refused_by": dict(sorted(refused_by.items())),
            "connect_errors": self.count("connect_error"),
            "retry_after_waited_s": round(self.retry_after_waited_s, 1),
            "sessions": {s: self.sessions[s] for s in SCENARIOS},
            "answered": self.outcomes["answered"], "dropped": self.outcomes["dropped"],
            "failed": self.outcomes["failed"],
            "dropped_while": {w: self.dropped_while[w] for w in ("speaking", "replying")},
            "barge_ins": {b: self.barge_ins[b] for b in ("cut", "too_late")},
            "failures": dict(self.failures.most_common()),
            "voice_to_voice": latency_summary(v2v),
            "voice_to_voice_by_scenario": {
                s: latency_summary([r.voice_to_voice_s for k, r in self.answers if k == s])
                for s in ("turn", "barge_in")},
            "late_chunks": sum(r.late_chunks for _s, r in self.answers),
            "answers": [{"scenario": s, **r.as_dict()} for s, r in self.answers],
        }


def _reason(exc: BenchRunError) -> str:
    """An error without its ``client N:`` prefix, so the same failure counts once."""
    text = str(exc)
    head, sep, rest = text.partition(": ")
    return (rest if sep and head.startswith("client ") else text)[:160]


async def _reply_started(client: RealtimeClient, utterance: Utterance, sent: list[float],
                         timeout: float) -> None:
    """Until the reply to ``utterance`` (audio after its end of speech) has started."""
    def started() -> bool:
        end_t = speech_end_time(client.tracker, utterance, sent)[0]
        return client.tracker.reply(end_t) is not None

    await client.wait_until(started, timeout, f"the reply to {Path(utterance.name).name}")


async def play_session(client: RealtimeClient, scenario: str, plan: LoadPlan, rng: random.Random,
                       stats: LoadStats) -> None:
    """One admitted session of ``scenario``, counted in ``stats``; the caller closes it."""
    speech = plan.speech
    if scenario == "turn":
        stats.answers.append((scenario, await client.turn(speech, client.clock() + LEAD_S,
                                                          plan.turn_timeout)))
        stats.outcomes["answered"] += 1
    elif scenario == "barge_in":
        sent, _late = await client.stream(speech, client.clock() + LEAD_S)
        await _reply_started(client, speech, sent, plan.turn_timeout)
        first = client.tracker.reply(speech_end_time(client.tracker, speech, sent)[0])
        result = await client.turn(plan.barge_speech, client.clock(), plan.turn_timeout)
        cut = first is not None and first.status == "cancelled"
        stats.barge_ins["cut" if cut else "too_late"] += 1
        stats.answers.append((scenario, result))
        stats.outcomes["answered"] += 1
    elif scenario == "drop":
        if rng.random() < 0.5:  # mid-sentence: a random part of the speech, then gone
            chunks = rng.randint(1, speech.speech_end_chunk() + 1)
            part = replace(speech, pcm=speech.pcm[:chunks * 2 * speech.chunk_samples()])
            await client.stream(part, client.clock() + LEAD_S)
            stats.dropped_while["speaking"] += 1
        else:  # gone as the reply starts
            sent, _late = await client.stream(speech, client.clock() + LEAD_S)
            await _reply_started(client, speech, sent, plan.turn_timeout)
            stats.dropped_while["replying"] += 1
        stats.outcomes["dropped"] += 1
    else:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}")


async def client_loop(index: int, url: str, plan: LoadPlan, stats: LoadStats, t0: float,
                      deadline: float) -> None:
    """Client ``index``: connect, play a session or wait after a refusal, until ``deadline``
    (``time.monotonic``; ``t0`` is the run's start)."""
    rng = random.Random(plan.seed * 100_003 + index)
    while time.monotonic() < deadline:
        client = RealtimeClient(url, index, plan.connect_timeout)
        t = round(time.monotonic() - t0, 3)
        try:
            await client.connect()
        except SessionRefused as refusal:
            stats.attempts.append(Attempt(index, t, "refused", refusal.how, refusal.retry_after_s))
            if refusal.retry_after_s is not None:  # honoured in full, plus up to 10% jitter
                wait = refusal.retry_after_s * rng.uniform(1.0, 1.1)
                stats.retry_after_waited_s += wait
            else:
                wait = plan.retry_s * rng.uniform(0.5, 1.5)
            await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))
            continue
        except BenchRunError as exc:
            stats.attempts.append(Attempt(index, t, "connect_error"))
            stats.failures[f"connect: {_reason(exc)}"] += 1
            await asyncio.sleep(max(0.0, min(plan.retry_s, deadline - time.monotonic())))
            continue
        stats.attempts.append(Attempt(index, t, "admitted"))
        scenario = rng.choices(SCENARIOS, SCENARIO_WEIGHTS)[0]
        stats.sessions[scenario] += 1
        try:
            await play_session(client, scenario, plan, rng, stats)
        except BenchRunError as exc:
            stats.outcomes["failed"] += 1
            stats.failures[f"{scenario}: {_reason(exc)}"] += 1
        finally:
            await client.close()


def _free_units(pool: dict) -> tuple[int, int]:
    units = [u for u in pool.get("units") or [] if isinstance(u, dict)]
    return sum(1 for u in units if u.get("state") == "free"), len(units)


async def wait_units_free(pool_url: str, timeout: float = FREE_TIMEOUT_S) -> dict:
    """The pool once every unit is free, or as it is after ``timeout`` (a unit still held
    then has leaked: the report says how many are free)."""
    deadline = time.monotonic() + timeout
    while True:
        pool = await get_json(pool_url)
        free, total = _free_units(pool)
        if free == total or time.monotonic() > deadline:
            return pool
        await asyncio.sleep(0.2)


async def _sample(pool_url: str, t0: float, samples: list[list], stop: asyncio.Event) -> None:
    while not stop.is_set():
        pool = await get_json(pool_url)
        free, total = _free_units(pool)
        samples.append([round(time.monotonic() - t0, 1), pool.get("rss_bytes"), total - free])
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)
        except TimeoutError:
            pass


def _progress_printer(progress: Callable[[str], None] | None, stats: LoadStats, t0: float,
                      stop: asyncio.Event) -> asyncio.Task | None:
    if progress is None:
        return None

    async def report() -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 30.0)
            except TimeoutError:
                progress(f"{time.monotonic() - t0:.0f} s: {stats.count('admitted')} admitted, "
                         f"{stats.count('refused')} refused, {stats.outcomes['answered']} answered, "
                         f"{stats.outcomes['failed']} failed")

    return asyncio.create_task(report())


async def run_load(url: str, pool_url: str, plan: LoadPlan,
                   progress: Callable[[str], None] | None = None,
                   stats: LoadStats | None = None) -> dict:
    """The whole load run against the server at ``url``; the report's JSON document
    (``format_load_report`` prints it). ``stats`` (if given) is filled in as it goes."""
    stats = LoadStats() if stats is None else stats
    t_start = time.monotonic()
    rss_start = (await wait_units_free(pool_url)).get("rss_bytes")
    if progress:
        progress(f"one warm-up turn ({Path(plan.barge_speech.name).name})...")
    async with RealtimeClient(url, -1, plan.connect_timeout) as warm:
        warmup = await warm.turn(plan.barge_speech, warm.clock() + LEAD_S, plan.turn_timeout)
    rss_warm = (await wait_units_free(pool_url)).get("rss_bytes")
    if progress:
        progress(f"{plan.clients} clients for {plan.duration_s:g} s against {plan.pipelines} "
                 f"pipeline(s)...")
    t0 = time.monotonic()
    samples: list[list] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(pool_url, t0, samples, stop))
    printer = _progress_printer(progress, stats, t0, stop)
    try:
        await asyncio.gather(*(client_loop(i, url, plan, stats, t0, t0 + plan.duration_s)
                               for i in range(plan.clients)))
    finally:
        stop.set()
        await asyncio.gather(sampler, *([printer] if printer else []), return_exceptions=True)
    load_s = time.monotonic() - t0
    pool = await wait_units_free(pool_url)
    free, total = _free_units(pool)
    rss_values = [s[1] for s in samples if isinstance(s[1], int)] + [
        v for v in (rss_warm, pool.get("rss_bytes")) if isinstance(v, int)]
    return {
        "mode": "load", "clients": plan.clients, "pipelines": plan.pipelines,
        "duration_s": plan.duration_s, "seed": plan.seed, "retry_s": plan.retry_s,
        "input": plan.speech.name, "barge_input": plan.barge_speech.name,
        "scenario_weights": dict(zip(SCENARIOS, SCENARIO_WEIGHTS)),
        **stats.as_dict(),
        "warmup": warmup.as_dict(),
        "rss": {"source": "GET /v1/pool rss_bytes", "start_bytes": rss_start,
                "after_warmup_bytes": rss_warm, "end_bytes": pool.get("rss_bytes"),
                "peak_bytes": max(rss_values) if rss_values else None,
                "samples": samples},  # [seconds into the load, rss_bytes, busy units]
        "units": {"total": total, "free_at_end": free},
        "load_s": round(load_s, 1), "wall_s": round(time.monotonic() - t_start, 1),
    }


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value / MIB:.1f} MiB"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def format_load_report(doc: dict) -> str:
    """The tables of a ``run_load`` document, for the terminal."""
    by = doc["refused_by"]
    sessions, barge, dropped = doc["sessions"], doc["barge_ins"], doc["dropped_while"]
    v2v, rss = doc["voice_to_voice"], doc["rss"]
    lines = [
        f"load: {doc['clients']} clients against {doc['pipelines']} pipeline(s) for "
        f"{doc['duration_s']:g} s (seed {doc['seed']}); each session streams "
        f"{Path(doc['input']).name} at real time",
        "session mix (weights): " + ", ".join(f"{k} {w}" for k, w in doc["scenario_weights"].items()),
        "",
        f"{'connections':>11}  {'admitted':>8}  {'refused':>7}  {'503':>5}  {'1013':>5}  {'errors':>6}",
        f"{doc['connections']:>11}  {doc['admitted']:>8}  {doc['refused']:>7}  "
        f"{by.get('http_503', 0):>5}  {by.get('session_limit_reached', 0):>5}  {doc['connect_errors']:>6}",
        "",
        f"{'admitted':>8}  {'turn':>5}  {'barge':>5}  {'drop':>5}  {'answered':>8}  {'dropped':>7}  "
        f"{'failed':>6}  {'barge cut':>9}  {'too late':>8}",
        f"{doc['admitted']:>8}  {sessions['turn']:>5}  {sessions['barge_in']:>5}  {sessions['drop']:>5}  "
        f"{doc['answered']:>8}  {doc['dropped']:>7}  {doc['failed']:>6}  {barge['cut']:>9}  "
        f"{barge['too_late']:>8}",
        f"dropped while speaking {dropped['speaking']}, while the reply played {dropped['replying']}; "
        f"Retry-After honoured for {doc['retry_after_waited_s']:g} s in all",
        "",
        f"voice-to-voice over {v2v['n']} answered: p50 {_ms(v2v['p50_s'])}, p95 {_ms(v2v['p95_s'])}, "
        f"min {_ms(v2v['min_s'])}, max {_ms(v2v['max_s'])}",
        *(f"  {name} ({row['n']}): p50 {_ms(row['p50_s'])}, p95 {_ms(row['p95_s'])}"
          for name, row in doc["voice_to_voice_by_scenario"].items()),
        f"server RSS ({rss['source']}): start {_mib(rss['start_bytes'])}, after warm-up "
        f"{_mib(rss['after_warmup_bytes'])}, end {_mib(rss['end_bytes'])}, peak {_mib(rss['peak_bytes'])}",
        f"units free at the end: {doc['units']['free_at_end']} of {doc['units']['total']}",
    ]
    for reason, count in doc["failures"].items():
        lines.append(f"  failed x{count}: {reason}")
    lines += ["", f"wall time {doc['wall_s']:.0f} s"]
    return "\n".join(lines)
