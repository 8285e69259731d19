"""Turn records and bench runs as JSON-ready dicts and as text for the terminal."""

from __future__ import annotations

import textwrap

from engine.measures import Figure, Mark, UnitOfMeasure
from engine.pipeline.critical_path import Segment, median_turn, path_json
from engine.pipeline.metrics import TurnRecord
from engine.models.placement import Placement
from engine.runtime.stats import percentile

_DIGITS = {UnitOfMeasure.SECONDS: 4, UnitOfMeasure.RATIO: 4, UnitOfMeasure.RATE: 2}


def figure_json(figure: Figure, value: float | None) -> float | int | None:
    """A figure's value as it appears in JSON: counts as integers, the rest rounded."""
    if figure.unit is UnitOfMeasure.COUNT:
        return int(value or 0)
    return _r(value, _DIGITS[figure.unit])


def turn_dict(record: TurnRecord) -> dict:
    """A turn as JSON: texts, timeline (seconds after the end of speech), figures, and
    its critical path (``engine.pipeline.critical_path``; None without a reply heard).

    The figure keys are the ``report`` members of ``Figure``, in their declared order.
    """
    out = {"turn_id": record.turn_id, "transcript": record.transcript, "reply": record.reply,
           "cancelled": record.cancelled, "timeline": record.timeline()}
    for figure in Figure:
        if figure.report:
            out[figure.value] = figure_json(figure, record.value(figure))
    # Newer keys follow the ones users had (the JSON contract keeps their order).
    out["language"] = record.language
    out["critical_path"] = path_json(record.critical_path())
    return out


def placement_dict(placement: Placement, actual_device: str | None) -> dict:
    return {"stage": placement.stage, "backend": placement.backend, "model": placement.model,
            "device": str(placement.device), "actual_device": actual_device,
            "bundled": placement.bundled}


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def format_turn(record: TurnRecord) -> str:
    """A few lines per turn for the terminal."""
    lines = [f"turn {record.turn_id}{' (cancelled)' if record.cancelled else ''}",
             f"  you:    {record.transcript or '(no words recognised)'}",
             f"  parley: {record.reply or '(no reply)'}"]
    timeline = record.timeline()
    if timeline:
        marks = "  ".join(f"{k}={v * 1000:+.0f}ms" for k, v in timeline.items()
                          if k != Mark.SPEECH_START)
        lines.append(f"  timeline (after end of speech): {marks}")
    if record.voice_to_voice is not None:
        lines.append(f"  voice-to-voice: {record.voice_to_voice * 1000:.0f} ms")
    return "\n".join(lines)


BENCH_FIGURES = tuple(f for f in Figure if f.bench)


def bench_summary(turns: list[dict]) -> dict:
    """p50/p95/min/max of every bench figure over all turns of all runs."""
    out = {}
    for figure in BENCH_FIGURES:
        key = figure.value
        values = [t[key] for t in turns if t.get(key) is not None and not t.get("cancelled")]
        out[key] = {"n": len(values), "p50": _r(percentile(values, 50)),
                    "p95": _r(percentile(values, 95)),
                    "min": _r(min(values)) if values else None,
                    "max": _r(max(values)) if values else None}
    return out


def format_value(figure: Figure, value: float | None) -> str:
    """A figure for people: milliseconds for seconds, tokens/s, plain ratios and counts."""
    if value is None:
        return "-"
    if figure.unit is UnitOfMeasure.SECONDS:
        return f"{value * 1000:.1f} ms"
    if figure.unit is UnitOfMeasure.RATE:
        return f"{value:.1f} tokens/s"
    if figure.unit is UnitOfMeasure.COUNT:
        return f"{value:.0f}"
    return f"{value:.3f}"


def format_bench(summary: dict) -> str:
    """The bench summary as a table for the terminal."""
    lines = [f"{'figure':32} {'n':>3} {'p50':>13} {'p95':>13} {'min':>13} {'max':>13}"]
    for figure in BENCH_FIGURES:
        s = summary[figure.value]
        cells = " ".join(f"{format_value(figure, s[k]):>13}" for k in ("p50", "p95", "min", "max"))
        lines.append(f"{figure.label:32} {s['n']:>3} {cells}")
    return "\n".join(lines)


BUDGET_NOTE = ("each part runs from one mark of the turn's timeline to the next, so the parts "
               "add up to voice-to-voice; waits are shown as waits: the lock and queue waits "
               "are measured by the stages and taken out of the parts they fell in, and "
               "engine overhead is what is left between one stage's output and the next "
               "stage's start (thread hand-offs), not a remainder")


def format_budget(columns: list[tuple[str, list[dict]]]) -> str:
    """The critical path of the median turn, one column per ``(name, turns)`` (turns as
    ``turn_dict`` dicts), in milliseconds: the parts, then their sum, voice-to-voice."""
    medians = [(name, median_turn(turns), len(turns)) for name, turns in columns]
    width = max(12, *(len(name) for name, _t, _n in medians)) + 2
    lines = [f"{'critical path of the median turn (ms)':40}"
             + "".join(f"{name or 'median turn':>{width}}" for name, _t, _n in medians)]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"{label:40}" + "".join(f"{c:>{width}}" for c in cells))

    for segment in Segment:
        row(segment.label, [f"{t['critical_path'][segment.value] * 1000:.1f}" if t else "-"
                            for _n, t, _c in medians])
    row("= voice-to-voice", [f"{t['voice_to_voice_s'] * 1000:.1f}" if t else "-"
                             for _n, t, _c in medians])
    row("turns measured (median of)", [str(sum(1 for x in turns if x.get("critical_path")))
                                       for _n, turns in columns])
    lines += textwrap.wrap(f"({BUDGET_NOTE})", 100, break_on_hyphens=False)
    return "\n".join(lines)
