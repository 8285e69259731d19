"""The flags every ``parley-cli bench`` report command ends with: ``--json``, ``-v`` and the
engine settings (the CLI's config flags where it passes them, else ``--config FILE``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

ConfigFlags = Callable[[argparse.ArgumentParser], None]


def add_report_flags(parser: argparse.ArgumentParser, add_config_flags: ConfigFlags | None) -> None:
    """Add ``--json``, ``-v/--verbose`` and the settings flags to ``parser``."""
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    if add_config_flags is not None:
        add_config_flags(parser)
    else:
        parser.add_argument("--config", metavar="FILE", help="TOML engine config")
