"""UnitPool: N pipeline units over one engine's shared models, lent one per client.

A client claims a free slot and gets a freshly started ``PipelineUnit``; when it leaves,
the unit is stopped (its history, KV cache, queues and any turn in flight go with it)
and the slot is free again. The next client gets a new unit, so nothing of an earlier
conversation can leak into it. Clients that find every slot taken may wait in the pool's
``waiting`` room (``engine.server.waiting_room``; none unless the server has ``--queue``).
``claim`` and ``release`` block (threads start and join): call them off the event loop.
Everything here is thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from engine.audio.base import AudioSink, AudioSource
from engine.backends.base import Backend
from engine.engine import Engine
from engine.measures import Mark
from engine.pipeline.metrics import TurnRecord
from engine.runtime.mlx_lock import MlxLock, get_mlx_lock
from engine.server.waiting_room import WaitingRoom
from engine.units.unit import PipelineUnit

log = logging.getLogger("parley.server")


@dataclass(frozen=True)
class Lease:
    """One client's hold on one slot: its running unit and where the client is."""

    slot: int
    unit: int  # the engine's unit number: events carry it
    client: str
    pipeline: PipelineUnit
    claimed_at: float  # perf_counter() when the unit started


class UnitPool:
    """``size`` slots numbered ``first_unit`` .. ``first_unit + size - 1`` in the engine.

    ``first_unit`` lets a pool share an engine with other units (the app's own) without
    two units carrying the same number in events and metrics. ``waiting``: the line of
    clients waiting for a slot (none by default: a full pool refuses).
    """

    def __init__(self, engine: Engine, size: int, first_unit: int = 0,
                 waiting: WaitingRoom | None = None) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one unit; got {size}")
        self.engine = engine
        self.size = size
        self.first_unit = first_unit
        self._lock = threading.Lock()
        self._slots: list[Lease | None] = [None] * size
        self._reserved: set[int] = set()
        self.waiting = waiting if waiting is not None else WaitingRoom(0)

    def claim(self, client: str, source: AudioSource, sink: AudioSink) -> Lease | None:
        """Start a unit for ``client`` on a free slot; None when every slot is taken."""
        with self._lock:
            free = [i for i in range(self.size) if self._slots[i] is None and i not in self._reserved]
            if not free:
                return None
            slot = free[0]
            self._reserved.add(slot)
        try:
            pipeline = self.engine.start_unit(source, sink, self.first_unit + slot)
        except BaseException:
            with self._lock:
                self._reserved.discard(slot)
            raise
        lease = Lease(slot, self.first_unit + slot, client, pipeline, time.perf_counter())
        with self._lock:
            self._reserved.discard(slot)
            self._slots[slot] = lease
        log.info("unit %d: claimed by %s", lease.unit, client)
        return lease

    def release(self, lease: Lease, timeout: float = 2.0) -> list[str]:
        """Stop the lease's unit and free its slot; returns threads that did not stop."""
        try:
            stuck = self.engine.stop_unit(lease.pipeline, timeout)
        finally:
            with self._lock:
                if self._slots[lease.slot] is lease:
                    self._slots[lease.slot] = None
        if stuck:
            log.warning("unit %d: threads did not stop: %s", lease.unit, ", ".join(stuck))
        log.info("unit %d: released by %s", lease.unit, lease.client)
        return stuck

    def leases(self) -> list[Lease]:
        """The slots in use now."""
        with self._lock:
            return [lease for lease in self._slots if lease is not None]

    @property
    def busy(self) -> int:
        """How many slots are taken (or being taken)."""
        with self._lock:
            return sum(lease is not None for lease in self._slots) + len(self._reserved)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        """The pool as ``GET /v1/pool`` reports it (see the README of realtime mode)."""
        import psutil

        with self._lock:
            slots = list(self._slots)
        turns = self.engine.metrics.turns()
        return {
            "num_pipelines": self.size,
            "rss_bytes": psutil.Process().memory_info().rss,
            "units": [self._unit_status(i, lease, turns) for i, lease in enumerate(slots)],
            "queue": self.waiting.status(),
            "models": self._models(),
            "notes": list(self.engine.notes),
        }

    def _unit_status(self, slot: int, lease: Lease | None, turns: tuple[TurnRecord, ...]) -> dict:
        if lease is None:
            return {"unit": self.first_unit + slot, "state": "free", "client": None, "turns": 0,
                    "history_turns": 0, "stage": None, "last_voice_to_voice_s": None}
        mine = [t for t in turns if t.unit == lease.unit
                and t.marks.get(Mark.SPEECH_START, 0.0) >= lease.claimed_at]
        heard = [t.voice_to_voice for t in mine if t.finished and t.voice_to_voice is not None]
        return {
            "unit": lease.unit, "state": "busy", "client": lease.client, "turns": len(mine),
            "history_turns": len(lease.pipeline.chat_history.exchanges()),
            "stage": current_stage(mine[-1] if mine else None, lease.pipeline.sink.is_playing),
            "last_voice_to_voice_s": round(heard[-1], 4) if heard else None,
        }

    def _models(self) -> list[dict]:
        out = []
        for stage, placement in self.engine.placements.items():
            model = self.engine.models.get(stage)
            lock = None if model is None else model.lock
            if lock is None and placement.device.kind == "mlx":
                lock = get_mlx_lock()  # an MLX model computes under the process-wide lock
            out.append({
                "stage": stage, "backend": placement.backend, "model": placement.model,
                "device": str(placement.device),
                "actual_device": self.engine.actual_device(stage),
                "memory_bytes": None if model is None else _memory_bytes(model),
                "lock": None if lock is None else lock_status(lock),
            })
        return out


def current_stage(turn: TurnRecord | None, playing: bool) -> str | None:
    """Where the latest turn is: ``stt``, ``llm``, ``tts``, ``playing``, or None (idle or
    the user still speaking), read from its timeline marks."""
    if turn is None or turn.cancelled or turn.finished:
        return "playing" if playing else None
    marks = turn.marks
    if Mark.AUDIO_OUT_FIRST in marks:
        return "playing"
    if Mark.TTS_FIRST_TEXT in marks:
        return "tts"
    if Mark.LLM_START in marks or Mark.STT_DONE in marks:
        return "llm"
    if Mark.STT_START in marks or Mark.COMMITTED in marks:
        return "stt"
    return "playing" if playing else None


def lock_status(lock: MlxLock) -> dict:
    """The figures of an instrumented lock (``engine.runtime.mlx_lock.MlxLock``), for JSON."""
    snap = lock.snapshot()
    return {"acquisitions": snap.acquisitions, "contended": snap.contended,
            "wait_total_s": round(snap.wait_total, 6), "wait_p95_s": round(snap.wait_p95, 6),
            "hold_total_s": round(snap.hold_total, 6), "utilization": round(snap.utilization, 4)}


def _memory_bytes(model: Backend) -> int | None:
    """The model's own weights where the backend knows them (``weights_bytes``), else
    what its ``memory_bytes()`` reports (on a GPU: the device's peak allocation)."""
    if model.weights_bytes is not None:
        return model.weights_bytes
    try:
        value = model.memory_bytes()
    except Exception:  # a report must not fail on one backend's probe (logged)
        log.exception("memory_bytes() failed on %r", type(model).__name__)
        return None
    return None if value is None else int(value)
