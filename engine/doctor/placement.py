"""The doctor's placement check: where ``auto`` would put each stage (backend, device,
model), resolved by ``engine.models.placement`` exactly as a load would, and why."""

from __future__ import annotations

from collections.abc import Mapping

from engine.config import EngineConfig
from engine.doctor.hub import HubAnswer
from engine.doctor.probes import Probes
from engine.doctor.report import Finding, Section, info, ok, problem
from engine.errors import ParleyError
from engine.runtime.devices import DeviceInfo
from engine.runtime.hub import HubStatus
from engine.models.placement import Placement, resolve_placements

_PIP_HINT = "Install it with: "


class _AnsweredHub(HubStatus):
    """The hub as the doctor found it: one probe answers the whole report."""

    def __init__(self, answer: HubAnswer) -> None:
        super().__init__(offline=answer.offline)
        self._answer = answer

    def reachable(self) -> bool:
        """The doctor's answer (never asked again)."""
        return bool(self._answer.reachable)


def choose_placements(config: EngineConfig, devices: list[DeviceInfo], answer: HubAnswer,
                      probes: Probes | None = None) -> dict[str, Placement] | ParleyError:
    """The placements a load of ``config`` would use here (sized by ``probes``'
    calibration), or the error it would stop with."""
    calibration = probes.calibration if probes is not None else None
    try:
        return resolve_placements(config, devices, hub=_AnsweredHub(answer), calibration=calibration)
    except ParleyError as exc:
        return exc


def explain(placement: Placement, config: EngineConfig, devices: list[DeviceInfo]) -> list[str]:
    """Why this backend, device and model, in a few words each."""
    section = config.stage_config(placement.stage)
    default = type(section)()  # every setting has a default
    spec = placement.spec
    if section.backend == "auto":
        why = [f"auto picked {spec.name} ({spec.description or spec.name})"]
    else:
        origin = "the default" if section.backend == default.backend else "set in the config"
        why = [f"backend {spec.name} ({origin})"]
    if section.device != "auto" or config.device != "auto":
        why.append("device set in the config")
    elif placement.endpoint:
        why.append(f"on the server at {placement.endpoint}")
    else:
        skipped = []
        here = placement.device.kind
        for kind in spec.devices[: spec.devices.index(here) if here in spec.devices else 0]:
            reasons = [d.reason for d in devices if d.device.kind == kind and not d.available and d.reason]
            skipped.append(f"{kind}: {reasons[0] if reasons else 'not present'}")
        best = f"{placement.device}, the best device {spec.name} runs on ({', '.join(spec.devices)})"
        why.append(best + (f"; not {'; '.join(skipped)}" if skipped else ""))
    if section.model != "auto":
        why.append("model set in the config")
    elif placement.bundled:
        why.append("the bundled offline model")
    elif not placement.endpoint:
        why.append(f"the hub default of {spec.name} on {placement.device.kind}")
    return why


def check_placement(config: EngineConfig, devices: list[DeviceInfo],
                    placements: Mapping[str, Placement] | ParleyError) -> Section:
    """One line per stage: where it runs and why; the resolver's notes; or why it cannot."""
    if isinstance(placements, ParleyError):
        text, _, pip = str(placements).partition(_PIP_HINT)
        fix = pip or ("set the stage's backend, device or model yourself (parley-cli doctor "
                      "--stt-device cpu ..., or Settings in the app), or install what the message names")
        return Section("placement", "What auto picks", (problem(f"no placement: {text.strip()}", fix),),
                       {"stages": {}, "error": str(placements)})
    findings: list[Finding] = []
    stages: dict[str, dict] = {}
    for stage, placement in placements.items():
        why = explain(placement, config, devices)
        stages[stage] = {"backend": placement.backend, "device": str(placement.device),
                         "model": placement.model, "bundled": placement.bundled,
                         "endpoint": placement.endpoint or None, "why": why, "notes": list(placement.notes)}
        findings.append(ok(f"{placement.describe()}: {'; '.join(why)}"))
        findings += [info(note) for note in placement.notes]
    return Section("placement", "What auto picks", tuple(findings), {"stages": stages})
