"""The doctor's model-size check: what ``auto`` picks from the model ladder for this
machine's measured speed and the voice-to-voice budget, why, and the runner-up
(``engine.models.stack_choice``), or that the machine is not calibrated yet and ``auto``
keeps its defaults by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.backends import BackendRegistry
from engine.config import EngineConfig
from engine.doctor.probes import Probes
from engine.doctor.report import Finding, Section, info, ok, warning
from engine.errors import ParleyError
from engine.models.placement import Placement
from engine.models.stack_choice import (BUDGET, EXPLICIT, Candidate, StackChoice, StageChoice,
                                         choose_for_config)

TITLE = "Models by budget"
#: The device kinds a stack is sized for when no placement says, best first.
_KINDS = ("cuda", "mlx", "cpu")


def stack_kind(placements: Mapping[str, Placement] | ParleyError, probes: Probes) -> str:
    """The device kind the LLM (else the STT) is placed on; without placements, the best
    kind present."""
    if not isinstance(placements, ParleyError):
        for stage in ("llm", "stt"):
            placement = placements.get(stage)
            if placement is not None and not placement.endpoint:
                return placement.device.kind
    present = {d.device.kind for d in probes.devices() if d.available}
    return next((kind for kind in _KINDS if kind in present), "cpu")


def choose(config: EngineConfig, placements: Mapping[str, Placement] | ParleyError,
           probes: Probes) -> StackChoice:
    """The ladder's choice for ``config`` on this machine, as the probes see it."""
    registry = BackendRegistry()

    def usable(stage: str, backend: str) -> bool:
        return all(probes.installed(name) for name in registry.get(stage, backend).requires)

    kind = stack_kind(placements, probes)
    return choose_for_config(config, probes.ladder(), probes.calibration(kind), kind, usable=usable)


def _candidate(candidate: Candidate | None) -> dict[str, Any] | None:
    if candidate is None:
        return None
    return {"rung": candidate.rung.id, "backend": candidate.build.backend,
            "model": candidate.build.repo, "precision": candidate.build.precision,
            "download_bytes": candidate.build.download_bytes,
            "cost_s": None if candidate.cost_s is None else round(candidate.cost_s, 3)}


def _finding(choice: StageChoice) -> Finding:
    if choice.warning:
        return warning(choice.warning.removesuffix(f"; {choice.fix}"), choice.fix)
    if choice.how == BUDGET and choice.chosen is not None:
        return ok(f"{choice.stage}: {choice.why}; {choice.chosen.size_text()} download; "
                  f"{choice.runner_up_text()}")
    if choice.how == EXPLICIT:
        return ok(f"{choice.stage}: {choice.why}")
    return info(f"{choice.stage}: {choice.why}")


def check_stack(stack: StackChoice) -> Section:
    """The summary (predicted turn against the budget, or not calibrated yet), then per
    stage what was picked and why, with the runner-up; a set model predicted slow is a
    warning with what ``auto`` would pick."""
    findings = [info(f"{stack.device_kind}: {stack.summary()}")]
    findings += [_finding(choice) for choice in stack.stages.values()]
    total = stack.predicted_s
    facts = {"device_kind": stack.device_kind, "budget_s": stack.budget_s,
             "language": stack.language, "measured": stack.measured, "source": stack.source or None,
             "predicted_s": None if total is None else round(total, 3),
             "stages": {stage: {"how": c.how, "why": c.why, "chosen": _candidate(c.chosen),
                                "runner_up": _candidate(c.runner_up),
                                "share_s": None if c.share_s is None else round(c.share_s, 3),
                                "warning": c.warning}
                        for stage, c in stack.stages.items()}}
    return Section("stack", TITLE, tuple(findings), facts)
