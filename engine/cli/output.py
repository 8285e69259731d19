"""What ``parley-cli`` subcommands share for their output: the ``--json`` document, and the
progress and placements of a loading engine on stderr.

Subcommand modules (``engine.cli.converse``, ``engine.cli.devices``) import this, never
``engine.cli``: ``engine.cli`` parses the arguments and imports them, not the other way
round (``tests/test_layering.py`` checks it).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.engine import Engine


def write_json(data: dict) -> None:
    """The one JSON document of ``--json``, on stdout (progress goes to stderr)."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def show_progress(stage: str, fraction: float | None, text: str) -> None:
    """A model's loading progress, one line on stderr (``Engine.load``'s callback)."""
    pct = "" if fraction is None else f" {fraction * 100:3.0f}%"
    print(f"[{stage}{pct}] {text}", file=sys.stderr, flush=True)


def show_choices(engine: Engine) -> None:
    """Where each stage runs and the engine's notes, on stderr, before anything loads."""
    from engine.recording import uses_bundled_stack  # numpy: only once an engine exists

    for placement in engine.placements.values():
        print(f"[{placement.stage}] {placement.describe()}", file=sys.stderr)
    for note in engine.notes:
        print(f"note: {note}", file=sys.stderr)
    if uses_bundled_stack(engine):
        print("note: using the bundled offline stack", file=sys.stderr)
