"""``parley-cli models``: the models on disk (``engine.models.model_cache``) from a terminal.

``models [list] [--json] [--no-bundled] [--config FILE]`` lists the hub cache, Parley's
cache and the bundled models with their sizes (and, given ``--config``, which stage's
explicit model each one is); ``models remove NAME [--yes]`` deletes a cached one (a hub
repo id or a Parley cache folder). Nothing is loaded here, so no stage holds a model
"right now" and removal is never refused for use; the app's Models dialog refuses it.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from engine.cli.output import write_json
from engine.models.model_cache import ModelScan, human_bytes, remove_model, scan_models, uses_of


def add_models_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Define ``models`` and its subcommands on ``parley-cli``'s subparsers."""
    models = subparsers.add_parser(
        "models", help="the models on disk: hub cache, Parley's cache, bundled; remove one")
    sub = models.add_subparsers(dest="models_command", metavar="{list,remove}")
    ls = sub.add_parser("list", help="every model on disk with its size (the default)")
    for parser in (models, ls):
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
        parser.add_argument("--no-bundled", action="store_true",
                            help="leave out the models bundled in installed packages")
        parser.add_argument("--config", metavar="FILE",
                            help="TOML engine config: show which stage names each model")
    rm = sub.add_parser("remove", help="delete a cached model (hub repo id or cache folder)")
    rm.add_argument("name", metavar="NAME", help="e.g. org/model, as `models list` shows it")
    return models




def _print_table(scan: ModelScan) -> None:
    print(f"hub cache: {scan.hub_cache}\nparley cache: {scan.parley_cache}")
    if not scan.models:
        print("no models on disk")
    for m in scan.models:
        used = ", ".join(m.used_by) or "-"
        when = datetime.fromtimestamp(m.last_used).strftime("%Y-%m-%d") if m.last_used else "-"
        print(f"{m.kind:<13} {human_bytes(m.size_bytes):>9}  {when:<10}  {used:<12} {m.name}")
    print(f"total: {human_bytes(scan.total_bytes)} in {len(scan.models)} models")
    for warning in scan.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def run_models(args: argparse.Namespace) -> int:
    """Run ``parley-cli models ...``; errors are ParleyErrors for the caller to print."""
    if getattr(args, "models_command", None) == "remove":
        scan = scan_models(bundled=True)
        model = scan.find(args.name)
        freed = remove_model(model)
        print(f"removed {model.name} ({model.kind}, {human_bytes(freed)} freed)")
        return 0
    config = None
    if getattr(args, "config", None):
        from engine.config import load_config

        config = load_config(args.config)
    scan = scan_models(uses_of(config=config), bundled=not args.no_bundled)
    if args.json:
        write_json(scan.as_dict())
    else:
        _print_table(scan)
    return 0
