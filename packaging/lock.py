"""The install lock (packaging/requirements.lock.txt), read back.

``make lock`` writes the lock with uv: one requirements file for every platform, each package
pinned with ``==`` and environment markers where a platform differs. Every ``make`` install
passes it to pip as a constraint file, so a fresh clone installs the versions the project was
tested with, whatever the index serves that day. This script reads it:

    python packaging/lock.py check [LOCK]   pyproject.toml's requirements all pinned in LOCK,
                                            each pin inside pyproject's range (exit 1 if not)
    python packaging/lock.py diff [LOCK]    the versions installed beside this Python, and
                                            those that differ from LOCK (``make test-latest``)

Why a pip constraint file and not ``uv sync``: pip is what every install here runs (the
Makefile, the Windows job, packaging/windows/README.md), and pip takes torch's CPU build
from a local wheel or the PyTorch CPU index, which uv does not consult in the same way;
a constraint file changes nothing else about those installs.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOCK = ROOT / "packaging" / "requirements.lock.txt"


@dataclass(frozen=True, slots=True)
class Pin:
    """One line of the lock: ``name==version`` for the environments its marker allows."""

    name: str
    version: Version
    marker: Marker | None

    def applies_here(self) -> bool:
        return self.marker is None or self.marker.evaluate()


def read_lock(path: Path) -> list[Pin]:
    """Every pin in ``path``; a line that is not ``name==version [; marker]`` is an error."""
    pins = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise ValueError(f"{path.name}:{number}: {line!r} is not pinned with == "
                             "(the lock pins every package to one version)")
        pins.append(Pin(canonicalize_name(requirement.name), Version(specs[0].version),
                        requirement.marker))
    return pins


def project_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[tuple[str, Requirement]]:
    """(where, requirement) for the base dependencies and every optional extra."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = [("dependencies", Requirement(text)) for text in project.get("dependencies", [])]
    for extra, texts in project.get("optional-dependencies", {}).items():
        found += [(f"[{extra}]", Requirement(text)) for text in texts]
    return found


def check(lock: Path, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """What is wrong with ``lock`` against ``pyproject``: one line per problem."""
    pins: dict[str, list[Pin]] = {}
    for pin in read_lock(lock):
        pins.setdefault(pin.name, []).append(pin)
    problems = []
    for where, requirement in project_requirements(pyproject):
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"{requirement.name} ({where}) is not in {lock.name}: run `make lock`")
            continue
        outside = [str(p.version) for p in pins[name]
                   if not requirement.specifier.contains(p.version, prereleases=True)]
        if outside:
            problems.append(f"{requirement.name} ({where}) asks for {requirement.specifier}, "
                            f"{lock.name} pins {', '.join(outside)}: run `make lock`")
    return problems


def diff(lock: Path) -> str:
    """The installed versions, those that differ from ``lock`` first."""
    pinned = {pin.name: pin.version for pin in read_lock(lock) if pin.applies_here()}
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version)
                 for d in metadata.distributions() if d.metadata["Name"]}
    changed = [f"  {name} {installed[name]} (lock: {pinned[name]})"
               for name in sorted(pinned) if name in installed
               and installed[name].public != pinned[name].public]
    lines = [f"Python {sys.version.split()[0]}, {len(installed)} distributions installed; "
             f"{len(changed)} differ from {lock.name}:", *changed, "", "All installed:"]
    lines += [f"  {name}=={installed[name]}" for name in sorted(installed)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("check", "diff") or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    lock = Path(argv[1]) if len(argv) == 2 else DEFAULT_LOCK
    if argv[0] == "diff":
        print(diff(lock))
        return 0
    problems = check(lock)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
