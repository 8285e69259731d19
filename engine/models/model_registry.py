"""ModelRegistry: load each model once per key, share it, free it when unused."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.backends.base import Backend, LoadRequest, Progress, no_progress
from engine.models.placement import Placement


@dataclass(frozen=True, slots=True)
class ModelKey:
    """What makes two loaded models the same one."""

    stage: str
    backend: str
    model: str
    device: str
    dtype: str
    options: tuple = ()  # the stage settings a backend reads at load time (voice, beam size...)


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model in the registry, with where it really lives."""

    key: ModelKey
    model: Backend
    actual_device: str
    load_seconds: float
    refs: int


_PLACEMENT_FIELDS = {"backend", "model", "device", "dtype"}
#: Settings that only a remote stage (an OpenAI-compatible server) loads with.
_REMOTE_FIELDS = {"base_url", "api_key_env", "timeout_s", "retries", "stream", "response_format"}


def load_options(options: object, remote: bool = False) -> tuple:
    """The (name, value) pairs of a stage config that affect loading its model; the
    server settings count only for a ``remote`` placement."""
    if options is None or not dataclasses.is_dataclass(options):
        return ()
    skip = _PLACEMENT_FIELDS if remote else _PLACEMENT_FIELDS | _REMOTE_FIELDS
    return tuple((f.name, getattr(options, f.name)) for f in dataclasses.fields(options)
                 if f.name not in skip and not f.metadata.get("runtime"))


class _Entry:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # held while loading: a second caller waits, then shares
        self.model: Backend | None = None
        self.load_seconds = 0.0
        self.refs = 0


class ModelRegistry:
    """Thread-safe, reference-counted cache of loaded models."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[ModelKey, _Entry] = {}
        self._loads: dict[str, int] = {}  # stage -> models really loaded (not shared)

    @staticmethod
    def key_for(placement: Placement, options: object = None) -> ModelKey:
        """The sharing key: changing a runtime-only setting (a prompt) reuses the model."""
        return ModelKey(placement.stage, placement.backend, placement.model,
                        str(placement.device), placement.dtype,
                        load_options(options, placement.device.kind == "remote"))

    def acquire(self, placement: Placement, options: object,
                progress: Progress = no_progress,
                loader: Callable[[LoadRequest, Progress], Backend] | None = None) -> Backend:
        """The model for ``placement``, loading it if no one holds it; adds a reference."""
        key = self.key_for(placement, options)
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            entry.refs += 1
        try:
            with entry.lock:
                if entry.model is None:
                    load = loader or placement.spec.import_module().load
                    request = LoadRequest(placement.model, placement.device, placement.dtype, options)
                    start = time.perf_counter()
                    entry.model = model = load(request, progress)
                    entry.load_seconds = time.perf_counter() - start
                    with self._lock:
                        self._loads[key.stage] = self._loads.get(key.stage, 0) + 1
                    return model
                return entry.model
        except BaseException:
            self._drop_ref(key)
            raise

    def load_count(self, stage: str | None = None) -> int:
        """How many models were really loaded (not shared), in all or for one stage."""
        with self._lock:
            return sum(n for s, n in self._loads.items() if stage is None or s == stage)

    def is_loaded(self, placement: Placement, options: object = None) -> bool:
        """True if the model for ``placement`` is loaded (so acquiring it costs nothing)."""
        with self._lock:
            entry = self._entries.get(self.key_for(placement, options))
        return entry is not None and entry.model is not None

    def release(self, placement: Placement, options: object = None) -> None:
        """Drop one reference; the model is freed when none remain."""
        self._drop_ref(self.key_for(placement, options))

    def _drop_ref(self, key: ModelKey) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.refs -= 1
            if entry.refs <= 0:
                del self._entries[key]
                if entry.model is not None:
                    entry.model.close()

    def loaded(self) -> tuple[LoadedModel, ...]:
        """What is loaded now, for the GUI's status line and `devices`."""
        with self._lock:
            items = list(self._entries.items())
        return tuple(
            LoadedModel(k, e.model, e.model.actual_device, e.load_seconds, e.refs)
            for k, e in items if e.model is not None
        )
