"""What the window says of the models ``auto`` offers and picks: one ``OfferRow`` per model
"Get larger models…" would download (its download size, its expected latency on this
machine, what it adds: tools, languages, accuracy, and why it was picked with the
runner-up), and the stack badge's tooltip lines (``choice_lines``). The figures come from
the placement's ``choice`` (``engine.models.stack_choice``); with no calibration the row
and the tooltip say the latency is not measured and ``auto`` kept its default by name.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from engine.backends.ladder import Ladder, shipped_ladder
from engine.models.stack_choice import BUDGET, Candidate, StageChoice, find_rung, gains


@dataclass(frozen=True, slots=True)
class OfferRow:
    """One model offered for download: ``size`` and ``latency`` as text, what it ``adds``
    over the model running now, and why it is the one offered (``why``, ``runner_up``)."""

    stage: str
    model: str
    size: str
    latency: str
    adds: tuple[str, ...]
    why: str
    runner_up: str = ""

    def html(self, label: str) -> str:
        """The dialog's list item: ``label``, then the figures and the reasons."""
        adds = f" · adds {', '.join(self.adds)}" if self.adds else ""
        reasons = " ".join(x for x in (self.why, self.runner_up and f"({self.runner_up})") if x)
        latency = f"latency {self.latency}" if self.latency.startswith("not ") else \
            f"expected {self.latency}"
        return (f"{html.escape(label)}<br><small>{html.escape(self.size)} · "
                f"{html.escape(latency + adds)}<br>{html.escape(reasons)}</small>")


def offer_row(stage: str, model: str, device_kind: str, choice: StageChoice | None,
              current: str | None = None, ladder: Ladder | None = None) -> OfferRow:
    """The row of ``model`` (a hub repo ``stage`` would load on ``device_kind``), with
    ``choice`` the stage's choice (its figures when it picked ``model``) and ``current``
    the model running now (what the offer's gains are counted against)."""
    ladder = ladder or shipped_ladder()
    picked = choice is not None and choice.how == BUDGET and choice.model == model
    candidate: Candidate | None = choice.chosen if picked and choice is not None else None
    rung = candidate.rung if candidate is not None else find_rung(ladder, model)
    now = find_rung(ladder, current) if current else None
    if candidate is None and rung is not None:
        build = rung.build(device_kind) or rung.builds[0]
        candidate = Candidate(rung, build, None)
    size = candidate.size_text() if candidate is not None else "size unknown"
    latency = candidate.latency_text() if candidate is not None else "not measured here"
    if picked and choice is not None:
        why, runner = f"Picked by budget: {choice.why}.", choice.runner_up_text()
    elif choice is not None:
        why, runner = f"Default by name: {choice.why}.", ""
    else:
        why, runner = "Default by name.", ""
    return OfferRow(stage, model, size, latency, tuple(gains(now, rung)) if rung else (), why, runner)


def choice_lines(placements: Iterable) -> list[str]:
    """The stack badge's tooltip lines of engine ``placements`` (with ``choice``): per
    stage what was picked, why and the runner-up; with no calibration, one line saying
    that the models are not sized to this machine yet."""
    choices = [p.choice for p in placements if p.choice is not None]
    if not choices:
        return []
    if all(c.how != BUDGET for c in choices) and any(c.how == "unmeasured" for c in choices):
        return ["Models are not sized to this machine yet: it has not been calibrated, so "
                "auto keeps its defaults by name."]
    lines = []
    for choice in choices:
        text = f"{choice.stage}: {choice.why}"
        if choice.how == BUDGET:
            text += f"; {choice.runner_up_text()}"
        lines.append(text)
    return lines
