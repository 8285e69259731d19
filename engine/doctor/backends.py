"""The doctor's backend check: each backend of the registry (``engine.backends``) imported
for real, with its libraries: which work, which are not installed (and the pip command
that installs them), and which are installed but fail to import (and why)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from engine.backends import BackendRegistry, BackendSpec
from engine.config import STAGES
from engine.doctor.probes import Probes
from engine.doctor.report import Finding, Level, Section, problem


@dataclass(frozen=True, slots=True)
class BackendImport:
    """One backend, imported: ``status`` is ok, missing (``error`` names the module) or broken."""

    spec: BackendSpec
    status: str
    error: str = ""
    import_s: float = 0.0

    def as_dict(self) -> dict:
        """Its row in the JSON document."""
        return {"stage": self.spec.stage, "name": self.spec.name, "extra": self.spec.extra,
                "status": self.status, "error": self.error or None, "import_s": round(self.import_s, 3)}


def import_backend(probes: Probes, spec: BackendSpec) -> BackendImport:
    """Import the backend's required libraries, then its module."""
    missing = next((name for name in spec.requires if not probes.installed(name)), None)
    if missing is not None:
        return BackendImport(spec, "missing", missing)
    started = time.perf_counter()
    for name in (*spec.requires, spec.module):
        try:
            probes.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a broken library raises anything (OSError: a DLL)
            return BackendImport(spec, "broken", f"import {name}: {type(exc).__name__}: {exc}",
                                 time.perf_counter() - started)
    return BackendImport(spec, "ok", "", time.perf_counter() - started)


def _pip(spec: BackendSpec) -> str:
    return f"pip install 'parley[{spec.extra}]'"


def _finding(probes: Probes, row: BackendImport) -> Finding:
    spec = row.spec
    name = f"{spec.stage} {spec.name}"
    if row.status == "ok":
        return Finding(Level.OK, f"{name}: imports ({row.import_s:.1f} s)")
    if row.status == "broken":
        return problem(f"{name}: installed, but does not import: {row.error}",
                       f"pip install --force-reinstall 'parley[{spec.extra}]' (the error names the "
                       "library that is missing or broken)")
    apple_silicon = probes.system == "Darwin" and probes.machine == "arm64"
    if spec.devices == ("mlx",) and not apple_silicon:
        return Finding(Level.INFO, f"{name}: not installed ({row.error}); it is for Apple Silicon Macs")
    if spec.devices == ("remote",):
        return Finding(Level.INFO, f"{name}: not installed ({row.error}); it puts the stage on a server",
                       _pip(spec))
    return Finding(Level.INFO, f"{name}: not installed ({row.error})", _pip(spec))


def check_backends(probes: Probes, registry: BackendRegistry | None = None) -> Section:
    """Every backend of every stage imported; a stage with no local backend that imports
    is a problem, with the pip command of its first choice."""
    registry = registry or BackendRegistry()
    rows: list[BackendImport] = []
    findings: list[Finding] = []
    for stage in STAGES:
        stage_rows = [import_backend(probes, spec) for spec in registry.specs(stage)]
        rows += stage_rows
        findings += [_finding(probes, row) for row in stage_rows]
        local = [row for row in stage_rows if row.spec.devices != ("remote",)]
        if local and not any(row.status == "ok" for row in local):
            first = local[0].spec
            findings.append(problem(f"{stage}: no backend that runs on this computer imports "
                                    f"({', '.join(row.spec.name for row in local)})", _pip(first)))
    return Section("backends", "Backends", tuple(findings), {"backends": [r.as_dict() for r in rows]})
