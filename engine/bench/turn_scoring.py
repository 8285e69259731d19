"""Scoring turn-taking against a reference: which commits were right, which cut a sentence.

The reference (``resources/audio/turns.json``) names, per recording, every place where
its speech stops: the true ends of turns, and the pauses inside a turn, ``inside`` a
sentence or ``between`` two sentences of one speaker. A run's commits are matched to those
places by where their speech ended; what is scored:

- right: a commit at a true end; its wait is the commit time minus the end of speech;
- cut: a commit at a pause inside a sentence (the turn is cut in the middle);
- split: a commit between two sentences of a speaker who goes on (cuts nothing);
- missed: a true end with no commit (the turn ran into the next one);
- unmatched: a commit near no reference place (a reference that lacks a pause).

Each commit also says whether the learned decision made it before the grace ran out
(``early``). Pure: the benchmark (``engine.bench.turn_taking``) and its tests use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median

from engine.errors import ConfigError

KINDS = ("end", "inside", "between")
TOLERANCE_S = 0.35  # a commit's end of speech within this of a reference place is at it


@dataclass(frozen=True, slots=True)
class Place:
    """Where the speech of a recording stops: at ``at_s``, a true end or a pause."""

    at_s: float
    kind: str  # one of KINDS
    text: str  # the turn's words (an end) or the words before the pause


@dataclass(frozen=True, slots=True)
class Reference:
    """One recording's places, in time order."""

    name: str
    places: tuple[Place, ...]

    @property
    def ends(self) -> int:
        return sum(p.kind == "end" for p in self.places)


@dataclass(frozen=True, slots=True)
class Commit:
    """One committed turn of a run: where its speech ended and when it was committed,
    in seconds from the recording's first sample, and whether it was decided early."""

    speech_end_s: float
    committed_s: float
    early: bool


@dataclass
class Score:
    """What one or several runs gave, summed (``add``)."""

    ends: int = 0
    right: int = 0
    right_early: int = 0
    cut: int = 0
    cut_early: int = 0
    split: int = 0
    missed: int = 0
    unmatched: int = 0
    waits: list[float] = field(default_factory=list)  # on the right commits
    cuts: list[str] = field(default_factory=list)  # "recording @ 2.24 s: words before"

    def add(self, other: Score) -> None:
        for name in ("ends", "right", "right_early", "cut", "cut_early", "split", "missed",
                     "unmatched"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.waits += other.waits
        self.cuts += other.cuts

    @property
    def mean_wait_s(self) -> float | None:
        return mean(self.waits) if self.waits else None

    @property
    def median_wait_s(self) -> float | None:
        return median(self.waits) if self.waits else None

    def as_dict(self) -> dict:
        return {"ends": self.ends, "right": self.right, "right_early": self.right_early,
                "cut_inside_sentence": self.cut, "cut_early": self.cut_early,
                "split_between_sentences": self.split, "missed_ends": self.missed,
                "unmatched": self.unmatched, "mean_wait_s": self.mean_wait_s,
                "median_wait_s": self.median_wait_s,
                "max_wait_s": max(self.waits) if self.waits else None,
                "waits_s": [round(w, 3) for w in self.waits], "cuts": self.cuts}


def nearest(reference: Reference, at_s: float, tolerance_s: float = TOLERANCE_S) -> Place | None:
    """The reference place nearest ``at_s``, if one is within ``tolerance_s``."""
    best = min(reference.places, key=lambda p: abs(p.at_s - at_s), default=None)
    return best if best is not None and abs(best.at_s - at_s) <= tolerance_s else None


def score_commits(reference: Reference, commits: list[Commit],
                  tolerance_s: float = TOLERANCE_S) -> Score:
    """Match each commit to the reference place where its speech ended, and count."""
    score = Score(ends=reference.ends)
    committed_ends: set[float] = set()
    for commit in commits:
        place = nearest(reference, commit.speech_end_s, tolerance_s)
        if place is None:
            score.unmatched += 1
        elif place.kind == "end":
            if place.at_s in committed_ends:  # two commits at one end cannot both be right
                score.unmatched += 1
                continue
            committed_ends.add(place.at_s)
            score.right += 1
            score.right_early += commit.early
            score.waits.append(commit.committed_s - commit.speech_end_s)
        elif place.kind == "inside":
            score.cut += 1
            score.cut_early += commit.early
            score.cuts.append(f"{reference.name} @ {place.at_s:.2f} s, after {place.text!r}")
        else:
            score.split += 1
    score.missed = score.ends - len(committed_ends)
    return score


def load_reference(path: Path) -> dict[str, Reference]:
    """``turns.json`` as References by file name; ConfigError naming what is wrong."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the turn-taking reference {path}: {exc}") from None
    recordings = doc.get("recordings") if isinstance(doc, dict) else None
    if not isinstance(recordings, dict) or not recordings:
        raise ConfigError(f"{path}: expected an object with 'recordings' (file name -> turns, pauses)")
    return {name: _reference(path, name, entry) for name, entry in recordings.items()}


def _reference(path: Path, name: str, entry: object) -> Reference:
    where = f"{path}: recordings.{name}"
    if not isinstance(entry, dict) or not isinstance(entry.get("turns"), list) or not entry["turns"]:
        raise ConfigError(f"{where}: expected 'turns' (a non-empty list) and 'pauses'")
    places = []
    for i, turn in enumerate(entry["turns"]):
        places.append(Place(_seconds(turn, "end_s", f"{where}.turns[{i}]"), "end",
                            str(turn.get("text", ""))))
    for i, pause in enumerate(entry.get("pauses", [])):
        kind = pause.get("kind") if isinstance(pause, dict) else None
        if kind not in ("inside", "between"):
            raise ConfigError(f"{where}.pauses[{i}].kind: {kind!r}; allowed: inside, between")
        places.append(Place(_seconds(pause, "start_s", f"{where}.pauses[{i}]"), kind,
                            str(pause.get("after", ""))))
    return Reference(name, tuple(sorted(places, key=lambda p: p.at_s)))


def _seconds(item: object, key: str, where: str) -> float:
    value = item.get(key) if isinstance(item, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where}.{key}: {value!r}; expected seconds (a number >= 0)")
    return float(value)
