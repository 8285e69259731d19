"""What moving one turn's data between devices costs: the copies a turn makes, timed.

A turn crosses between the host and a stage's device at fixed points: the utterance and
Whisper's log-mel window go to the STT device, its transcript tokens come back; the
prompt's ids go to the LLM device, and every generated token is one id there and one
chosen id back; the phoneme ids go to the TTS device and the reply's audio comes back.
Between stages only text travels (on the host), so a device-to-device copy is not made
by the pipeline today; it is measured with the same payloads to say what one would cost.

Each copy is timed with ``time.perf_counter`` around the copy with the devices involved
synchronized before and after (``torch.cuda.synchronize``): the wall time a turn waits,
launch overhead included. Host memory is pageable, as the backends allocate it; on CUDA
the host routes are measured once more with pinned memory. ``cpu -> cpu`` (a memcpy) is
the route a machine without a GPU has, and the one the tests run.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from engine.errors import ConfigError
from engine.runtime.stats import percentile

TO_DEVICE, TO_HOST = "to_device", "to_host"
STT_RATE, TTS_RATE = 16000, 24000
MEL_FRAMES = 3000  # one 30 s Whisper window, 10 ms hop


@dataclass(frozen=True)
class Payload:
    """One tensor a turn moves: its shape and dtype, which way the pipeline sends it,
    and how many times per turn."""

    name: str
    what: str
    shape: tuple[int, ...]
    dtype: str
    direction: str
    per_turn: int

    @property
    def nbytes(self) -> int:
        size = {"float32": 4, "float16": 2, "int64": 8}[self.dtype]
        return size * math.prod(self.shape)


@dataclass(frozen=True)
class TurnShape:
    """The sizes of one turn; ``source`` says where each came from (measured or assumed)."""

    audio_s: float
    mel_bins: int = 128
    transcript_tokens: int = 35
    prompt_tokens: int = 120
    reply_tokens: int = 60
    phonemes: int = 160
    sentences: int = 3
    reply_audio_s: float = 5.0
    source: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("audio_s", "mel_bins", "transcript_tokens", "prompt_tokens",
                     "reply_tokens", "phonemes", "sentences", "reply_audio_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"turn shape: {name} must be positive; got {getattr(self, name)}")


def turn_payloads(turn: TurnShape) -> list[Payload]:
    """The copies one turn makes between the host and its stages' devices."""
    windows = max(1, math.ceil(turn.audio_s / 30))
    return [
        Payload("audio", f"the utterance, {turn.audio_s:.1f} s of 16 kHz float32 (to an STT "
                "that computes its features on the device)", (round(turn.audio_s * STT_RATE),),
                "float32", TO_DEVICE, 1),
        Payload("features", f"Whisper's log-mel window ({turn.mel_bins} x {MEL_FRAMES} float32)",
                (1, turn.mel_bins, MEL_FRAMES), "float32", TO_DEVICE, windows),
        Payload("transcript", "the transcript's token ids", (1, turn.transcript_tokens), "int64",
                TO_HOST, windows),
        Payload("prompt", "the prompt's token ids, prefilled", (1, turn.prompt_tokens), "int64",
                TO_DEVICE, 1),
        Payload("decode_in", "one generated token fed back", (1, 1), "int64", TO_DEVICE,
                turn.reply_tokens),
        Payload("decode_out", "the chosen token id read back", (1,), "int64", TO_HOST,
                turn.reply_tokens),
        Payload("phonemes", "one sentence's phoneme ids", (1, max(1, turn.phonemes // turn.sentences)),
                "int64", TO_DEVICE, turn.sentences),
        Payload("reply_audio", f"the reply, {turn.reply_audio_s:.1f} s of 24 kHz float32",
                (round(turn.reply_audio_s * TTS_RATE),), "float32", TO_HOST, 1),
    ]


@dataclass(frozen=True)
class Route:
    """A copy from ``src`` to ``dst`` (torch device strings); ``pinned``: the host side
    is page-locked."""

    src: str
    dst: str
    pinned: bool = False

    @property
    def label(self) -> str:
        return f"{self.src} -> {self.dst}{' (pinned)' if self.pinned else ''}"

    @property
    def kind(self) -> str:
        """host_to_device, device_to_host, device_to_device or host_to_host."""
        ends = ["host" if d == "cpu" else "device" for d in (self.src, self.dst)]
        return f"{ends[0]}_to_{ends[1]}"


def routes_for(device_kind: str, cuda_count: int = 0) -> list[Route]:
    """The routes to measure: ``cpu -> cpu`` without a GPU; with CUDA the host routes
    (pageable and pinned), on-device, and both ways between the first two GPUs."""
    if device_kind == "cpu":
        return [Route("cpu", "cpu")]
    if device_kind != "cuda" or cuda_count < 1:
        raise ConfigError(f"transfers: no routes for device {device_kind!r} with {cuda_count} "
                          "CUDA device(s); measure on cpu or cuda")
    out = [Route("cpu", "cuda:0"), Route("cuda:0", "cpu"), Route("cpu", "cuda:0", True),
           Route("cuda:0", "cpu", True), Route("cuda:0", "cuda:0")]
    if cuda_count >= 2:
        out += [Route("cuda:0", "cuda:1"), Route("cuda:1", "cuda:0")]
    return out


def _synchronizer(route: Route):
    import torch

    devices = {d for d in (route.src, route.dst) if d.startswith("cuda")}

    def sync() -> None:
        for device in devices:
            torch.cuda.synchronize(device)
    return sync


def time_copies(payload: Payload, route: Route, repeats: int, warmup: int = 3) -> list[float]:
    """Seconds per copy of ``payload`` along ``route``, ``repeats`` times (after
    ``warmup`` untimed copies: the first copy pays allocator and driver setup)."""
    import torch

    dtype = getattr(torch, payload.dtype)
    source = torch.ones(payload.shape, dtype=dtype, device=route.src)
    if route.pinned and route.src == "cpu":
        source = source.pin_memory()
    target = torch.empty(payload.shape, dtype=dtype, device=route.dst,
                         pin_memory=route.pinned and route.dst == "cpu")
    sync = _synchronizer(route)
    seconds = []
    for index in range(warmup + repeats):
        sync()
        started = time.perf_counter()
        target.copy_(source)
        sync()
        if index >= warmup:
            seconds.append(time.perf_counter() - started)
    return seconds


def _pct(seconds: list[float], q: float) -> float:
    value = percentile(seconds, q)
    if value is None:
        raise ValueError("no copies were timed")  # time_copies times at least one
    return value


def _row(payload: Payload, route: Route, seconds: list[float]) -> dict:
    median = _pct(seconds, 50)
    return {"payload": payload.name, "route": route.label, "bytes": payload.nbytes,
            "per_turn": payload.per_turn, "median_s": round(median, 9),
            "p95_s": round(_pct(seconds, 95), 9), "min_s": round(min(seconds), 9),
            "gb_per_s": round(payload.nbytes / median / 1e9, 3) if median > 0 else None,
            "per_turn_s": round(median * payload.per_turn, 9)}


def _turn_total(route: Route, rows: list[dict], payloads: list[Payload]) -> dict | None:
    """What one turn pays on ``route``: the payloads the pipeline sends that way (all of
    them on a device-to-device or host-to-host route, the what-if)."""
    wanted = {"host_to_device": {TO_DEVICE}, "device_to_host": {TO_HOST}}.get(
        route.kind, {TO_DEVICE, TO_HOST})
    names = {p.name for p in payloads if p.direction in wanted}
    mine = [r for r in rows if r["route"] == route.label and r["payload"] in names]
    if not mine:
        return None
    return {"route": route.label, "kind": route.kind, "payloads": sorted(names),
            "copies": sum(r["per_turn"] for r in mine),
            "bytes": sum(r["bytes"] * r["per_turn"] for r in mine),
            "seconds": round(sum(r["per_turn_s"] for r in mine), 9)}


def measure_transfers(turn: TurnShape, routes: list[Route], repeats: int = 30) -> dict:
    """Every payload of ``turn`` along every route: per copy and per turn, and what a
    whole turn pays per route."""
    if repeats < 1:
        raise ConfigError(f"transfers: repeats must be at least 1; got {repeats}")
    payloads = turn_payloads(turn)
    rows = [_row(p, r, time_copies(p, r, repeats)) for r in routes for p in payloads]
    totals = [t for t in (_turn_total(r, rows, payloads) for r in routes) if t is not None]
    return {"turn": asdict(turn), "repeats": repeats, "timing": "perf_counter around "
            "copy_ with torch.cuda.synchronize before and after (wall time, launch included)",
            "payloads": [{**asdict(p), "bytes": p.nbytes} for p in payloads],
            "copies": rows, "per_turn": totals}
