"""``parley-cli calibrate``: this machine's speed for every ladder rung, measured without downloads.

The measuring is ``engine.models.calibration``'s (random weights at the real widths,
no hub, no torch); this module parses, prints the table and how long it took. Without
``--again`` a calibration cached for this machine and Parley version is shown as it is.
"""

from __future__ import annotations

import argparse
import sys

from engine.cli.output import write_json

DEVICE_KINDS = ("cpu", "cuda", "mps", "mlx")


def add_calibrate_parser(sub) -> None:
    """``calibrate [--device-kind KIND] [--again] [--json]``."""
    parser = sub.add_parser(
        "calibrate", help="predict each ladder model's latency on this machine (no download)",
        description="Time each model architecture of the ladder (resources/ladder.toml) on this "
                    "machine with random weights at its real width, and predict per model: one "
                    "STT call (10 s and 30 s windows), the LLM's first token and tokens/s, the "
                    "TTS first chunk. Cached per machine and Parley version.")
    parser.add_argument("--device-kind", choices=DEVICE_KINDS, default="cpu",
                        help="the device kind to calibrate (default cpu)")
    parser.add_argument("--again", action="store_true",
                        help="measure again even if a calibration is cached")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


def run_calibrate(args: argparse.Namespace) -> int:
    """Show the cached calibration, or measure (and cache) one; print it."""
    from dataclasses import asdict

    from engine.models.calibration import cached_calibration, calibrate, format_calibration

    calibration = None if args.again else cached_calibration(args.device_kind)
    if calibration is None:
        print(f"calibrating {args.device_kind} (random weights, nothing downloaded)...",
              file=sys.stderr, flush=True)
        calibration = calibrate(args.device_kind)
    else:
        print("cached calibration (--again measures again)", file=sys.stderr)
    if args.json:
        write_json(asdict(calibration))
    else:
        print(format_calibration(calibration))
    return 0
