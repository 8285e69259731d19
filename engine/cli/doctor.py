"""``parley-cli doctor``: what Parley finds on this computer, and what to do about each problem.

The checks are ``engine.doctor``'s (the app's Help > Check this computer runs the same);
this module only parses, prints the report (text, or ``--json`` for bug reports) and
picks the exit status: 0 whatever was found, unless ``--strict`` (1 when a problem was
found). The JSON document's shape is ``engine.doctor.report.JSON_SHAPE``, shown by
``parley-cli doctor --help``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.cli.output import write_json
from engine.config import EngineConfig
from engine.doctor.report import JSON_SHAPE, Section, render_text

if TYPE_CHECKING:
    from engine.doctor.probes import Probes

STRICT_EXIT = 1


def add_doctor_parser(sub, add_config_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    """``doctor [--json] [--strict]`` and the config flags (the models to check the disk for)."""
    doctor = sub.add_parser(
        "doctor", help="check this computer: packages, GPUs, backends, sound, Qt, hub, disk, placement",
        description="One report of what Parley finds on this computer and what to do about each "
                    "problem. Loads no model; asks the hub once (2 s timeout; never when "
                    "HF_HUB_OFFLINE=1). Config flags (--config, --stt-device...) choose the "
                    "placement it explains and the models whose disk space it checks.",
        epilog=JSON_SHAPE, formatter_class=argparse.RawDescriptionHelpFormatter)
    doctor.add_argument("--json", action="store_true",
                        help="one JSON document on stdout, for bug reports (shape below)")
    doctor.add_argument("--strict", action="store_true",
                        help=f"exit with status {STRICT_EXIT} when a problem was found (warnings "
                             "do not count)")
    add_config_flags(doctor)


def _progress(section: Section) -> None:
    print(f"[doctor] {section.title}: {section.elapsed_s:.1f} s", file=sys.stderr, flush=True)


def run_doctor(args: argparse.Namespace, config: EngineConfig, probes: Probes | None = None) -> int:
    """Run every check (through ``probes``: default the real machine) and print the report;
    the exit status (see the module docstring)."""
    from engine.doctor.run import run_checks  # the checks' modules: only when they run

    report = run_checks(config, probes, on_section=_progress if args.verbose else None)
    if args.json:
        write_json(report.as_dict())
    else:
        sys.stdout.write(render_text(report))
    return STRICT_EXIT if args.strict and report.has_problems else 0
