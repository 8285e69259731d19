"""What a doctor check returns, and the report of all of them: as text for people and as
JSON for bug reports.

A check returns one ``Section``: its facts (plain JSON values: versions, devices, sizes)
and its ``Finding``s, each one line at one ``Level``. A warning or a problem always carries
its fix, one line too. ``JSON_SHAPE`` is the JSON document's description, shown by
``parley-cli doctor --help``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

#: The version of the JSON document's shape; raised when a key changes meaning or goes.
SCHEMA = 1

JSON_SHAPE = """\
JSON (--json), one document on stdout:
  {"schema": 1, "parley": "0.1.0" | null, "created": "2026-12-02T08:00:00Z",
   "elapsed_s": 3.2,
   "platform": {"system": "Linux", "release": "...", "machine": "x86_64",
                "python": "3.11.9", "frozen": false},
   "sections": [{"key": "python", "title": "Python and packages", "elapsed_s": 0.01,
                 "facts": {...},
                 "findings": [{"level": "ok" | "info" | "warning" | "problem",
                               "text": "one line", "fix": "one line" | null}]}, ...],
   "problems": [{"section": "hub", "level": "warning" | "problem",
                 "text": "...", "fix": "..."}]}
Sections, in order, and their facts:
  python     python, implementation, executable, virtualenv, bits, packages {dist: version|null}
  cpu        model, machine, logical_cores, physical_cores, features {avx2, avx512f, neon...},
             memory_total_bytes, memory_available_bytes
  cuda       driver, gpus [{index, name, total_bytes, free_bytes}], torch {...},
             ctranslate2 {...}, onnxruntime {...}, libraries {name: "loaded" | error}
  apple      mac, mlx {...} | null; on a Mac also chip, macos, rosetta, mps {built, available}
  backends   backends [{stage, name, extra, status: ok|missing|broken, error, import_s}]
  sound      portaudio, missing, inputs [labels], outputs [labels],
             configured {input|output: {setting, device, error}}
  qt         installed, qt_qpa_platform, qt, platform, plugins [names], load_error, error, live
  hub        endpoint, offline, reachable (null: not asked), why, answer_s, cache_dir, cache_bytes,
             parley_cache_dir, parley_cache_bytes
  placement  stages {stage: {backend, device, model, bundled, endpoint, why [...], notes [...]}},
             error (only when no placement is possible)
  stack      device_kind, budget_s, language, measured, source, predicted_s,
             stages {stage: {how: budget|explicit|unmeasured|none, why, share_s, warning,
                             chosen, runner_up: {rung, backend, model, precision,
                                                 download_bytes, cost_s} | null}}
  disk       models [{stage, model, on_disk, download_bytes}], needed_bytes,
             locations [{path, free_bytes, total_bytes}]
A problem is something broken that Parley needs; a warning works but is slower or
limited. The exit status is 0 whatever was found (--strict: 1 when a problem was found).
"""


class Level(enum.StrEnum):
    """How much a finding matters, from nothing to do to broken."""

    OK = "ok"  # a check passed
    INFO = "info"  # a fact worth a line; nothing to do
    WARNING = "warning"  # Parley works, slower or with less; the fix says how to do better
    PROBLEM = "problem"  # something Parley needs is broken; the fix says how to mend it


_NEEDS_FIX = (Level.WARNING, Level.PROBLEM)


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of a section; a warning or a problem names its fix."""

    level: Level
    text: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.level in _NEEDS_FIX and not self.fix:
            raise ValueError(f"a {self.level} finding needs its fix: {self.text!r}")

    def as_dict(self) -> dict[str, Any]:
        """The finding's JSON form."""
        return {"level": str(self.level), "text": self.text, "fix": self.fix or None}


def ok(text: str) -> Finding:
    """A passed check."""
    return Finding(Level.OK, text)


def info(text: str) -> Finding:
    """A fact worth a line."""
    return Finding(Level.INFO, text)


def warning(text: str, fix: str) -> Finding:
    """Works, but slower or with less; ``fix`` says how to do better."""
    return Finding(Level.WARNING, text, fix)


def problem(text: str, fix: str) -> Finding:
    """Broken; ``fix`` says how to mend it."""
    return Finding(Level.PROBLEM, text, fix)


@dataclass(frozen=True, slots=True)
class Section:
    """What one check found: ``key`` names it in the JSON, ``title`` in the text."""

    key: str
    title: str
    findings: tuple[Finding, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def worst(self) -> Level:
        """The most serious level among the findings (OK when there are none)."""
        order = list(Level)
        return max((f.level for f in self.findings), key=order.index, default=Level.OK)

    def as_dict(self) -> dict[str, Any]:
        """The section's JSON form."""
        return {"key": self.key, "title": self.title, "elapsed_s": round(self.elapsed_s, 3),
                "facts": self.facts, "findings": [f.as_dict() for f in self.findings]}


@dataclass(frozen=True, slots=True)
class Report:
    """Every section, in the order they ran, and where and when."""

    sections: tuple[Section, ...]
    platform: dict[str, Any]
    parley: str | None
    created: str  # ISO 8601, UTC
    elapsed_s: float

    def section(self, key: str) -> Section:
        """The section called ``key``; KeyError naming the keys there are."""
        for section in self.sections:
            if section.key == key:
                return section
        raise KeyError(f"no section {key!r}; sections: {', '.join(s.key for s in self.sections)}")

    def needing_fix(self, level: Level | None = None) -> list[tuple[Section, Finding]]:
        """The warnings and problems (or those of ``level`` only), with their sections."""
        wanted = _NEEDS_FIX if level is None else (level,)
        return [(s, f) for s in self.sections for f in s.findings if f.level in wanted]

    @property
    def has_problems(self) -> bool:
        """True when something Parley needs is broken."""
        return bool(self.needing_fix(Level.PROBLEM))

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``parley-cli doctor --json`` (``JSON_SHAPE``)."""
        return {"schema": SCHEMA, "parley": self.parley, "created": self.created,
                "elapsed_s": round(self.elapsed_s, 3), "platform": self.platform,
                "sections": [s.as_dict() for s in self.sections],
                "problems": [{"section": s.key, **f.as_dict()} for s, f in self.needing_fix()]}


_MARKS = {Level.OK: "ok", Level.INFO: "--", Level.WARNING: "warning", Level.PROBLEM: "PROBLEM"}


def render_text(report: Report) -> str:
    """The report for people: one block per section, then the warnings and problems again,
    each with its fix."""
    where = report.platform
    lines = [f"Parley doctor: parley {report.parley or '(not installed)'}, Python "
             f"{where.get('python')}, {where.get('system')} {where.get('release')} "
             f"{where.get('machine')}, {report.created}, {report.elapsed_s:.1f} s", ""]
    for section in report.sections:
        lines.append(f"{section.title}")
        for finding in section.findings:
            lines.append(f"  [{_MARKS[finding.level]}] {finding.text}")
            if finding.fix:
                lines.append(f"      fix: {finding.fix}")
        lines.append("")
    todo = report.needing_fix()
    if not todo:
        lines.append("Nothing to fix.")
    else:
        problems = len(report.needing_fix(Level.PROBLEM))
        lines.append(f"To fix: {problems} problem{'s' if problems != 1 else ''}, "
                     f"{len(todo) - problems} warning{'s' if len(todo) - problems != 1 else ''}")
        for section, finding in todo:
            lines.append(f"  [{_MARKS[finding.level]}] {section.key}: {finding.text}")
            lines.append(f"      fix: {finding.fix}")
    return "\n".join(lines) + "\n"
