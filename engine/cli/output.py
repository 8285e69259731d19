"""What ``parley-cli`` subcommands share for their output: the ``--json`` document.

Subcommand modules (``engine.cli.converse``, ``engine.cli.devices``) import this, never
``engine.cli``: ``engine.cli`` parses the arguments and imports them, not the other way
round (``tests/test_layering.py`` checks it).
"""

from __future__ import annotations

import json


def write_json(data: dict) -> None:
    """The one JSON document of ``--json``, on stdout (progress goes to stderr)."""
    print(json.dumps(data, indent=2, ensure_ascii=False))
