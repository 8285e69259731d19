"""Run every doctor check, in order, into one ``Report``.

A check that raises is a bug in the check, not a finding about the machine: its section
says so (with the error) and the others still run, so the report always comes back.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime

from engine.config import EngineConfig
from engine.doctor.backends import check_backends
from engine.doctor.cuda import check_cuda
from engine.doctor.desktop import check_qt
from engine.doctor.hub import ask_hub, check_disk, check_hub
from engine.doctor.machine import check_apple, check_cpu
from engine.doctor.placement import check_placement, choose_placements
from engine.doctor.probes import Probes
from engine.doctor.python_env import check_python
from engine.doctor.report import Report, Section, problem
from engine.doctor.sound import check_sound
from engine.doctor.stack import TITLE as STACK_TITLE, check_stack, choose
from engine.errors import ParleyError

#: Every section, in the order they run and print: key -> title.
SECTIONS = {"python": "Python and packages", "cpu": "Processor and memory", "cuda": "NVIDIA CUDA",
            "apple": "Apple Silicon", "backends": "Backends", "sound": "Sound", "qt": "Desktop (Qt)",
            "hub": "Model hub and caches", "placement": "What auto picks", "stack": STACK_TITLE,
            "disk": "Disk space"}


def _guarded(key: str, check: Callable[[], Section]) -> Section:
    started = time.perf_counter()
    try:
        section = check()
    except Exception as exc:  # noqa: BLE001 - one broken check must not cost the whole report
        section = Section(key, SECTIONS[key], (problem(
            f"this check failed: {type(exc).__name__}: {exc}",
            "this is a bug in Parley: report it with the output of parley-cli doctor --json"),))
    return dataclasses.replace(section, elapsed_s=time.perf_counter() - started)


def run_checks(config: EngineConfig | None = None, probes: Probes | None = None,
               on_section: Callable[[Section], None] | None = None) -> Report:
    """Every check of this machine for ``config`` (default: the default config), through
    ``probes`` (default: the real machine). ``on_section`` receives each section as it is
    done (progress). Loads no model; the hub is asked once, with a 2 s timeout."""
    config = config or EngineConfig()
    probes = probes or Probes()
    started = time.perf_counter()
    sections: list[Section] = []

    def add(key: str, check: Callable[[], Section]) -> None:
        section = _guarded(key, check)
        sections.append(section)
        if on_section is not None:
            on_section(section)

    add("python", lambda: check_python(probes))
    add("cpu", lambda: check_cpu(probes))
    add("cuda", lambda: check_cuda(probes))
    add("apple", lambda: check_apple(probes))
    add("backends", lambda: check_backends(probes))
    add("sound", lambda: check_sound(probes, config))
    add("qt", lambda: check_qt(probes))
    answer = ask_hub(probes)
    add("hub", lambda: check_hub(probes, answer))
    chosen: dict = {}  # the placement check's result, for the disk check

    def placement() -> Section:
        devices = probes.devices()
        chosen["placements"] = choose_placements(config, devices, answer, probes)
        return check_placement(config, devices, chosen["placements"])

    add("placement", placement)
    placements = chosen.get("placements")
    add("stack", lambda: check_stack(choose(config, placements if placements is not None
                                            else ParleyError("no placement"), probes)))
    add("disk", lambda: check_disk(probes, None if isinstance(placements, ParleyError) else placements,
                                   answer))
    where = {"system": probes.system, "release": probes.release, "machine": probes.machine,
             "python": probes.python()["version"], "frozen": probes.frozen}
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Report(tuple(sections), where, probes.version("parley"), created, time.perf_counter() - started)
