"""``parley-cli tls``: the CA and certificate of ``serve --tls-self-signed``
(``engine.server.tls``), kept in ``<cache>/tls`` (``$PARLEY_CACHE_DIR/tls`` when set).

``show [--json]`` lists the files, the CA's name and SHA-256 fingerprint (as a phone shows
its profile), the names it can vouch for, the server certificate's names and end, and
the machine's names it does not cover. ``rotate`` makes a new CA and certificate for the
machine's current names; ``remove`` deletes the files. Both say what to do on the phones
that trusted the old CA. Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
from typing import TYPE_CHECKING

from engine.cli.output import write_json
from engine.errors import ParleyError

if TYPE_CHECKING:
    from engine.server.tls import KeptAuthority

COMMANDS = ("show", "rotate", "remove")
PHONE_REMOVAL = (
    "  iOS / iPadOS: Settings > General > VPN & Device Management > the profile > Remove Profile",
    "  Android: Settings > Security & privacy > More security settings > Encryption & "
    "credentials > Trusted credentials > User > the CA > Remove",
)


def add_tls_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Define ``tls`` and its subcommands on ``parley-cli``'s subparsers."""
    tls = subparsers.add_parser(
        "tls", help="the CA and certificate of serve --tls-self-signed: show, rotate, remove",
        description="serve --tls-self-signed keeps a local CA (ca.pem, which clients and phones "
                    "trust), the server's certificate and its key in the tls folder of Parley's "
                    "cache ($PARLEY_CACHE_DIR/tls when set). The CA can vouch only for this "
                    "machine's names and its private key is never kept.")
    sub = tls.add_subparsers(dest="tls_command", required=True,
                             metavar="{" + ",".join(COMMANDS) + "}")
    show = sub.add_parser("show", help="the files, fingerprints, names and end date")
    show.add_argument("--json", action="store_true", help="one JSON document on stdout")
    sub.add_parser("rotate", help="a new CA and certificate for this machine's current names "
                                  "(phones must trust the new ca.pem)")
    sub.add_parser("remove", help="delete the CA and certificate (remove the CA from phones too)")
    return tls


def run_tls(args: argparse.Namespace) -> int:
    """Run one ``tls`` subcommand; returns the exit status (errors raise ParleyError)."""
    # Imported here: building the parser (every parley-cli command) imports this module.
    from engine.server.tls import kept_authority, machine_names, remove, rotate, tls_folder

    if args.tls_command == "show":
        return _show(json_output=args.json)
    old = _readable_authority()
    if args.tls_command == "rotate":
        made = rotate()
        now = kept_authority()
        if now is None:  # rotate has just written it: gone again means someone deleted it
            raise ParleyError(f"the new TLS files in {tls_folder()} disappeared at once")
        print(f"made a new CA and server certificate in {now.folder}")
        _print_authority(now, machine_names())
        print(f"\nPhones and other clients must trust the new CA file {made.ca_file} "
              "(README, \"A phone needs HTTPS\"); restart a running server to use it.")
        if old is not None:
            _print_old_profile(old)
        return 0
    if args.tls_command == "remove":
        removed = remove()
        if not removed:
            print(f"no TLS files in {tls_folder()}: nothing to remove")
            return 0
        print("deleted " + ", ".join(str(path) for path in removed))
        if old is not None:
            _print_old_profile(old)
        print("A running server keeps its certificate until it stops; the next "
              "`parley-cli serve --tls-self-signed` makes a new CA.")
        return 0
    raise ParleyError(f"unknown tls command {args.tls_command!r}")  # argparse allows only the above


def _show(*, json_output: bool) -> int:
    """``tls show``: what is kept, or that nothing is."""
    from engine.server.tls import kept_authority, machine_names, tls_folder

    kept = kept_authority()
    machine = machine_names()
    if json_output:
        write_json({"folder": str(tls_folder()), "kept": None if kept is None else {
            "ca_file": str(kept.ca_file), "cert_file": str(kept.cert_file),
            "key_file": str(kept.key_file), "ca_name": kept.ca_name,
            "ca_fingerprint": kept.ca_fingerprint, "fingerprint": kept.fingerprint,
            "names": list(kept.names),
            "ca_permits": None if kept.permitted is None else list(kept.permitted),
            "expires": kept.expires.isoformat(), "old_ca_key": kept.old_ca_key,
            "problem": kept.problem or None, "uncovered": _uncovered(kept, machine)}})
        return 0
    if kept is None:
        print(f"no TLS files in {tls_folder()}: `parley-cli serve --tls-self-signed` "
              "makes them")
        return 0
    print(f"TLS files of serve --tls-self-signed: {kept.folder}")
    _print_authority(kept, machine)
    return 0


def _print_authority(kept: KeptAuthority, machine: tuple[str, ...]) -> None:
    """The lines of ``tls show`` about a kept CA and certificate."""
    print(f"CA: {kept.ca_file} (what clients and phones trust)")
    print(f"  name: {kept.ca_name}")
    print(f"  SHA-256 fingerprint: {kept.ca_fingerprint}")
    if kept.permitted is None:
        print("  can vouch for: ANY site (an older Parley's CA: `parley-cli tls rotate` "
              "replaces it)")
    else:
        print(f"  can vouch only for: {', '.join(kept.permitted)}")
    print("  private key: " + ("kept in ca-key.pem by an older Parley: `parley-cli tls rotate` "
                               "deletes it" if kept.old_ca_key else "not kept"))
    print(f"server certificate: {kept.cert_file}, key {kept.key_file} (owner-only)")
    print(f"  SHA-256 fingerprint: {kept.fingerprint}")
    print(f"  for: {', '.join(kept.names)}")
    print(f"  ends: {kept.expires:%Y-%m-%d %H:%M} UTC (a new CA is made from "
          f"{kept.expires - _renew_before():%Y-%m-%d} on: phones must then trust it)")
    if kept.problem:
        print(f"the next start replaces them: {kept.problem}")
    uncovered = _uncovered(kept, machine)
    if uncovered:
        print(f"not covered: {', '.join(uncovered)} (this machine answers to them now; "
              "`parley-cli tls rotate` makes a CA for them)")


def _print_old_profile(old: KeptAuthority) -> None:
    """How to remove the replaced CA from the phones that trust it."""
    print(f"\nRemove the old CA \"{old.ca_name}\" (SHA-256 {old.ca_fingerprint}) from each "
          "phone that trusted it:")
    print("\n".join(PHONE_REMOVAL))
    if old.permitted is None:
        print("It was an older Parley's CA, which could vouch for any site: remove it.")


def _readable_authority() -> KeptAuthority | None:
    """The kept CA before it is replaced, to name it; None when there is none to name."""
    from engine.server.tls import kept_authority

    try:
        return kept_authority()
    except ParleyError:
        return None  # damaged files: rotate and remove still work, only the name is unknown


def _uncovered(kept: KeptAuthority, machine: tuple[str, ...]) -> list[str]:
    """The names ``machine`` answers to that the kept certificate does not name."""
    from engine.server.local_ca import certifiable_names

    return [name for name in certifiable_names(machine) if name not in kept.names]


def _renew_before() -> datetime.timedelta:
    from engine.server.tls import RENEW_BEFORE_DAYS

    return datetime.timedelta(days=RENEW_BEFORE_DAYS)
