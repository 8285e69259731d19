"""``parley-cli bench --layouts ... --plot FILE.png``: stage latencies per layout.

One stacked bar per layout: the critical path of its median turn
(``engine.pipeline.critical_path``: silence wait, STT, LLM to first token and to first
clause, TTS first chunk, the wait for the commit, lock and queue waits, engine overhead,
to the speaker), which adds up to that turn's voice-to-voice; and an error bar on the
measured voice-to-voice from its minimum to its p95. matplotlib (the ``lab`` extra) is
imported here only, with the Agg backend: no display is needed.
"""

from __future__ import annotations

from engine.errors import MissingDependencyError
from engine.measures import Figure
from engine.pipeline.critical_path import Segment, median_path


def layout_paths(doc: dict) -> list[dict[Segment, float] | None]:
    """Per layout of a ``bench --layouts`` document: its median turn's critical path."""
    return [median_path([t for run in row["turns"] for t in run]) for row in doc["layouts"]]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("--plot", "matplotlib", "lab") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def require_matplotlib() -> None:
    """MissingDependencyError now, before any model loads, if the plot cannot be drawn."""
    _pyplot()


def plot_layouts(doc: dict, path: str) -> None:
    """Write the stacked-bar PNG of a ``bench --layouts --json`` document to ``path``."""
    plt = _pyplot()
    layouts = doc["layouts"]
    labels = [row["layout"] for row in layouts]
    xs = range(len(layouts))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(layouts) + 3), 5.5), dpi=120)
    bottoms = [0.0] * len(layouts)
    paths = layout_paths(doc)
    for segment in Segment:
        heights = [(path[segment] if path else 0.0) * 1000 for path in paths]
        if not any(heights):
            continue  # a part no layout had (no lock waits...): no bar, no legend entry
        hatch = "//" if segment.wait else None  # a wait did no work: drawn hatched
        ax.bar(xs, heights, 0.6, bottom=bottoms, label=segment.label, hatch=hatch)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    v2v = [row["summary"][Figure.VOICE_TO_VOICE_S.value] for row in layouts]
    centers = [(s["p50"] or 0.0) * 1000 for s in v2v]
    lower = [max(0.0, c - (s["min"] or 0.0) * 1000) for c, s in zip(centers, v2v)]
    upper = [max(0.0, (s["p95"] or 0.0) * 1000 - c) for c, s in zip(centers, v2v)]
    ax.errorbar(xs, centers, yerr=[lower, upper], fmt="o", color="black", capsize=6,
                label="voice-to-voice p50 (bar: min to p95)")
    ax.set_xticks(list(xs), labels, rotation=15, ha="right")
    ax.set_ylabel("milliseconds after the end of speech")
    ax.set_title(f"Critical path of the median turn per layout ({doc['runs']} run(s) of "
                 f"{len(doc['inputs'])} input(s))")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, bbox_inches="tight")  # the legend sits right of the axes
    plt.close(fig)
