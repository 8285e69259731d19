"""The doctor's hub and disk checks: is the Hugging Face hub reachable (one HEAD request with
a 2 s timeout, never sent when offline), how large are the model caches, and is there disk
space for the models the placement chose."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.doctor.probes import Probes
from engine.doctor.report import Finding, Section, info, ok, problem, warning
from engine.runtime.hub import HubStatus
from engine.models.model_cache import human_bytes, parley_models_dir
from engine.models.model_catalog import profile
from engine.models.placement import Placement

HEAD_TIMEOUT_S = 2.0
SIZE_TIMEOUT_S = 2.0
LOW_DISK_BYTES = 2 * 10**9  # below this, a download or a conversion can fill the disk
MARGIN_BYTES = 10**9  # kept free beyond what the downloads need
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "true", "yes", "on"}
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # engine.runtime.hub.offline's rule
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+(:.+)?")  # org/name, or org/name:path/in/the/repo
_MOVE_CACHE = "or move the hub cache to a larger disk (HF_HUB_CACHE=/path/on/it)"


@dataclass(frozen=True, slots=True)
class HubAnswer:
    """What asking the hub found: ``reachable`` is None when it was not asked (offline)."""

    endpoint: str
    offline: bool
    reachable: bool | None
    why: str = ""  # why it did not answer
    answer_s: float | None = None

    @property
    def usable(self) -> bool:
        """True when models may be downloaded now."""
        return bool(self.reachable)


def hub_offline(env: Mapping[str, str]) -> bool:
    """``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1/true/yes/on in ``env``."""
    return any(env.get(name, "").strip().lower() in _TRUE for name in _OFFLINE_VARIABLES)


def ask_hub(probes: Probes) -> HubAnswer:
    """One HEAD request to the hub's endpoint, unless the environment says offline."""
    endpoint = (probes.env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    if hub_offline(probes.env):
        return HubAnswer(endpoint, True, None)
    started = time.perf_counter()
    why = probes.hub_head(endpoint, HEAD_TIMEOUT_S)
    return HubAnswer(endpoint, False, not why, why, time.perf_counter() - started)


def check_hub(probes: Probes, answer: HubAnswer) -> Section:
    """Reachable or offline, and the size of the hub cache and of Parley's own cache."""
    hub_cache, parley_cache = HubStatus(offline=True).cache_dir(), parley_models_dir()
    hub_bytes, parley_bytes = probes.folder_bytes(hub_cache), probes.folder_bytes(parley_cache)
    facts = {"endpoint": answer.endpoint, "offline": answer.offline, "reachable": answer.reachable,
             "why": answer.why or None,
             "answer_s": None if answer.answer_s is None else round(answer.answer_s, 3),
             "cache_dir": str(hub_cache), "cache_bytes": hub_bytes,
             "parley_cache_dir": str(parley_cache), "parley_cache_bytes": parley_bytes}
    findings: list[Finding] = []
    if not probes.installed("huggingface_hub"):
        findings.append(warning("huggingface_hub is not installed: no hub model can be downloaded or "
                                "found in the cache, only bundled ones", "pip install 'parley[offline]'"))
    if answer.offline:
        names = [n for n in _OFFLINE_VARIABLES if probes.env.get(n, "").strip().lower() in _TRUE]
        findings.append(info(f"offline ({names[0]}={probes.env[names[0]]}): the hub is not "
                             "asked; Parley uses cached and bundled models"))
    elif answer.reachable:
        findings.append(ok(f"the hub ({answer.endpoint}) answers ({(answer.answer_s or 0) * 1000:.0f} ms)"))
    else:
        findings.append(problem(f"the hub ({answer.endpoint}) does not answer: {answer.why}",
                                "check the network or the proxy (HTTPS_PROXY); to work without the hub, "
                                "set HF_HUB_OFFLINE=1 (cached and bundled models only)"))
    findings.append(info(f"hub cache {hub_cache}: {human_bytes(hub_bytes)}"))
    findings.append(info(f"Parley's cache {parley_cache}: {human_bytes(parley_bytes)}"))
    return Section("hub", "Model hub and caches", tuple(findings), facts)


def _size(size: int | None) -> str:
    return human_bytes(size) if size is not None else "size unknown"


def _on_disk(placement: Placement, hub: HubStatus) -> bool:
    if placement.bundled or hub.is_cached(placement.model):
        return True
    return Path(placement.model).expanduser().exists()


def _download_bytes(probes: Probes, model: str, answer: HubAnswer) -> int | None:
    """What ``model`` downloads: as the hub lists it when it answers, else as Parley's
    catalog of known models has it (None: unknown)."""
    size = probes.model_download_bytes(model, SIZE_TIMEOUT_S) if answer.usable else None
    if size is None:
        known = profile(model)
        size = known.size_bytes if known.known else None
    return size


def check_disk(probes: Probes, placements: Mapping[str, Placement] | None, answer: HubAnswer) -> Section:
    """The models the placement chose that are not on disk yet, what they download, and the
    free space where they would go."""
    hub = HubStatus(offline=True)
    models: list[dict] = []
    findings: list[Finding] = []
    for placement in (placements or {}).values():
        if placement.endpoint:  # a remote stage's model lives on its server
            continue
        on_disk = _on_disk(placement, hub)
        is_hub = bool(_HUB_ID.fullmatch(placement.model))
        size = None if on_disk or not is_hub else _download_bytes(probes, placement.model, answer)
        models.append({"stage": placement.stage, "model": placement.model, "on_disk": on_disk,
                       "download_bytes": size})
        if on_disk:
            continue
        if not is_hub:
            findings.append(problem(f"{placement.stage}: the model {placement.model} does not exist (it is "
                                    "no hub id, org/name, either)",
                                    f"set {placement.stage}.model to a model folder or file that exists, or "
                                    "to auto"))
            continue
        if not answer.usable:
            state = "offline" if answer.offline else "unreachable"
            findings.append(problem(f"{placement.stage}: {placement.model} is not on this computer "
                                    f"({_size(size)}) and the hub is {state}",
                                    f"connect once so it downloads on first load, or set {placement.stage}"
                                    ".model to a local folder"))
        else:
            findings.append(info(f"{placement.stage}: {placement.model} downloads on first load "
                                 f"({_size(size)})"))
    needed = sum(m["download_bytes"] or 0 for m in models)
    locations = []
    seen: set[tuple[int, int, int]] = set()
    for folder in (hub.cache_dir(), parley_models_dir()):
        total, used, free = probes.disk_usage(folder)
        locations.append({"path": str(folder), "free_bytes": free, "total_bytes": total})
        if (total, used, free) in seen:  # the same disk as the folder before
            continue
        seen.add((total, used, free))
        wants = needed if folder == hub.cache_dir() else 0
        if wants and free < wants + MARGIN_BYTES:
            findings.append(problem(f"{human_bytes(free)} free on the disk of {folder}, and the models to "
                                    f"download need {human_bytes(wants)}",
                                    f"free {human_bytes(wants + MARGIN_BYTES - free)} there, {_MOVE_CACHE}"))
        elif free < LOW_DISK_BYTES:
            findings.append(problem(f"the disk of {folder} is nearly full: {human_bytes(free)} free of "
                                    f"{human_bytes(total)}",
                                    f"free {human_bytes(LOW_DISK_BYTES - free)} there, {_MOVE_CACHE}"))
        else:
            findings.append(ok(f"{folder}: {human_bytes(free)} free of {human_bytes(total)}"))
    facts = {"models": models, "needed_bytes": needed, "locations": locations}
    return Section("disk", "Disk space", tuple(findings), facts)
