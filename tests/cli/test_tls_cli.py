"""``parley-cli tls show|rotate|remove``, run as a user runs it, on a cache folder of its own:
show lists what the CA can vouch for and that its key is not kept; rotate makes a new CA
and says to trust it and to remove the old one from phones; remove deletes the files."""

from __future__ import annotations

import json
import re

import pytest

from engine.server.tls import fingerprint, self_signed
from tests.support.cli import run_cli


@pytest.fixture
def cache(tmp_path):
    return {"PARLEY_CACHE_DIR": str(tmp_path)}


def tls(env: dict, *args: str):
    result = run_cli("tls", *args, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def test_show_before_anything_is_made(cache, tmp_path):
    assert f"no TLS files in {tmp_path / 'tls'}" in tls(cache, "show")
    assert json.loads(tls(cache, "show", "--json")) == {"folder": str(tmp_path / "tls"), "kept": None}


def test_show_lists_the_ca_its_names_and_the_certificate(cache, tmp_path):
    made = self_signed(tmp_path / "tls")  # what serve --tls-self-signed makes, for this machine
    out = tls(cache, "show")
    ca_fingerprint = fingerprint(made.ca_file.read_bytes())
    assert f"CA: {made.ca_file}" in out and f"SHA-256 fingerprint: {ca_fingerprint}" in out
    assert f"can vouch only for: {', '.join(made.names)}" in out
    assert "private key: not kept" in out and f"SHA-256 fingerprint: {made.fingerprint}" in out
    assert re.search(r"ends: \d{4}-\d\d-\d\d \d\d:\d\d UTC", out)
    shown = json.loads(tls(cache, "show", "--json"))["kept"]
    assert shown["ca_permits"] == list(made.names) == shown["names"]
    assert shown["ca_fingerprint"] == ca_fingerprint and shown["uncovered"] == []


def test_show_names_an_address_the_certificate_lacks(cache, tmp_path):
    self_signed(tmp_path / "tls", ("localhost", "127.0.0.1"))  # ::1 is always a machine name
    out = tls(cache, "show")
    assert re.search(r"^not covered: .*::1\b", out, re.M) and "parley-cli tls rotate" in out
    assert "::1" in json.loads(tls(cache, "show", "--json"))["kept"]["uncovered"]


def test_rotate_makes_a_new_ca_and_says_what_to_do_on_phones(cache, tmp_path):
    old = self_signed(tmp_path / "tls")
    old_ca = old.ca_file.read_bytes()
    out = tls(cache, "rotate")
    new_ca = old.ca_file.read_bytes()
    assert new_ca != old_ca and fingerprint(new_ca) in out
    assert f"must trust the new CA file {old.ca_file}" in out
    assert "Remove the old CA \"Parley local CA" in out and fingerprint(old_ca) in out
    assert "Remove Profile" in out and "Trusted credentials" in out
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.pem", "server-key.pem", "server.pem"]


def test_remove_deletes_the_files_and_says_to_remove_the_ca_from_phones(cache, tmp_path):
    made = self_signed(tmp_path / "tls")
    out = tls(cache, "remove")
    assert f"deleted {made.key_file}" in out and str(made.ca_file) in out
    assert "Remove Profile" in out
    assert not (tmp_path / "tls").exists()
    assert "nothing to remove" in tls(cache, "remove")


def test_damaged_files_are_one_clear_error(cache, tmp_path):
    made = self_signed(tmp_path / "tls")
    made.cert_file.write_text("not a certificate")
    result = run_cli("tls", "show", env=cache, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"the TLS files in {tmp_path / 'tls'} cannot be used" in result.stderr
    assert "parley-cli tls rotate" in result.stderr
    tls(cache, "rotate")  # and rotate mends them
    assert "private key: not kept" in tls(cache, "show")
