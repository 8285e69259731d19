"""TLS: ``parley-cli serve --tls-self-signed`` serves ``wss://`` (the official ``openai``
client's realtime connect, verifying with the printed CA file) and ``https://`` (the HTTP
routes) on one port; the certificate is made once and kept, its CA can vouch for no other
name (a forged certificate fails a real handshake) and its key is never kept; an older
unconstrained CA and a certificate near its end are replaced; bad TLS flags and files are
clear errors before anything loads. One server serves the module.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.server.server_settings import ServerSettings
from engine.server.local_ca import make_authority, private_key_pem, sign_server_certificate
from engine.server.tls import (TlsCertificate, fingerprint, kept_authority, remove, resolve_tls, rotate,
                               self_signed, server_context)
from tests.support.cli import run_cli
from tests.support.server import ServeProcess, free_port

NAMES = ("localhost", "127.0.0.1", "::1")


@pytest.fixture(scope="module")
def tls_served():
    port = free_port()
    server = ServeProcess("--port", str(port), "--tls-self-signed",
                          env={"PARLEY_CACHE_DIR": os.environ["PARLEY_CACHE_DIR"]})
    server.wait_ready(300)
    yield server, port
    server.stop()


def printed(server: ServeProcess, pattern: str) -> str:
    found = re.search(pattern, server.stderr, re.M)
    assert found, server.stderr
    return found.group(1)


def client_context(server: ServeProcess) -> ssl.SSLContext:
    """What a client does with the printed CA file (Python's defaults: hostname checked)."""
    return ssl.create_default_context(cafile=printed(server, r"^clients verify it with the CA file (.+)$"))


@pytest.mark.slow
def test_serve_prints_wss_the_fingerprint_and_the_ca_file(tls_served):
    server, port = tls_served
    assert f"serving on wss://127.0.0.1:{port}/v1/realtime (1 pipeline)" in server.stderr
    assert f"web page: https://127.0.0.1:{port}/ (open it in a browser" in server.stderr
    ca_file = Path(printed(server, r"^clients verify it with the CA file (.+)$"))
    folder = Path(os.environ["PARLEY_CACHE_DIR"]) / "tls"
    assert ca_file == folder / "ca.pem" and ca_file.is_file()
    shown = printed(server, r"^TLS certificate SHA-256 fingerprint: ([0-9A-F:]+)$")
    assert shown == fingerprint((folder / "server.pem").read_bytes()) and len(shown) == 95
    names = printed(server, r"^TLS: self-signed certificate \((?:made now|kept) in .+\) for (.+)$")
    assert {"localhost", "127.0.0.1", "::1"} <= set(names.split(", "))


@pytest.mark.slow
def test_the_openai_realtime_client_connects_over_wss(tls_served):
    from openai import AsyncOpenAI

    server, port = tls_served
    context = client_context(server)

    async def run():
        client = AsyncOpenAI(api_key="unused-on-loopback", base_url=f"https://127.0.0.1:{port}/v1",
                             websocket_base_url=f"wss://127.0.0.1:{port}/v1")
        async with client.realtime.connect(model="parley", websocket_connection_options={
                "proxy": None, "ssl": context}) as conn:
            created = await conn.recv()
            await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
            updated = await conn.recv()
        return created, updated

    created, updated = asyncio.run(asyncio.wait_for(run(), 60))
    assert created.type == "session.created" and updated.type == "session.updated"


@pytest.mark.slow
def test_the_http_routes_are_served_over_https(tls_served):
    server, port = tls_served
    context = client_context(server)
    for path in ("/v1/pool", "/v1/models"):
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=10,
                                    context=context) as response:
            assert response.status == 200
            body = json.loads(response.read())
        assert body.get("num_pipelines") == 1 or body.get("object") == "list", body
    with urllib.request.urlopen(f"https://localhost:{port}/v1/pool", timeout=10,
                                context=context) as response:  # a name, not only an address
        assert response.status == 200
    # Without the CA file a client refuses the certificate; plain HTTP gets no answer.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/v1/pool", timeout=10,
                               context=ssl.create_default_context())
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/pool", timeout=10)


# ---------------------------------------------------------------------- the certificate
def test_a_self_signed_certificate_is_made_once_and_kept(tmp_path):
    made = self_signed(tmp_path, NAMES)
    assert made.made and made.ca_file == tmp_path / "ca.pem" and made.names == NAMES
    assert (made.cert_file.stat().st_mode & 0o777, made.key_file.stat().st_mode & 0o777) == (0o644, 0o600)
    assert any(str(made.ca_file) in note for note in made.notes)  # the user is told to trust it
    kept = self_signed(tmp_path, NAMES)
    assert not kept.made and kept.fingerprint == made.fingerprint and kept.notes == ()
    # A new LAN address: the certificate is kept (phones keep trusting its CA) and the
    # user is told which address it lacks and how to get a CA for it.
    ca = made.ca_file.read_bytes()
    moved = self_signed(tmp_path, (*NAMES, "192.168.7.9"))
    assert not moved.made and moved.fingerprint == made.fingerprint and made.ca_file.read_bytes() == ca
    assert len(moved.notes) == 1 and "192.168.7.9" in moved.notes[0]
    assert "parley-cli tls rotate" in moved.notes[0]
    rotated = rotate(tmp_path, (*NAMES, "192.168.7.9"))
    assert rotated.made and "192.168.7.9" in rotated.names and made.ca_file.read_bytes() != ca
    context = ssl.create_default_context(cafile=str(made.ca_file))
    context.load_verify_locations(cadata=ca.decode())  # the CA loads as a trust anchor
    settings = ServerSettings(port=0, tls_self_signed=True)
    assert settings.url(8443) == "wss://127.0.0.1:8443/v1/realtime"
    assert settings.http_url(8443) == "https://127.0.0.1:8443/v1"


def test_no_key_of_the_ca_is_kept_and_both_certificates_are_short_lived(tmp_path):
    from cryptography import x509

    made = self_signed(tmp_path, (*NAMES, "studio.local", "192.168.7.9"))
    # The only private key in the folder is the server's (a CA key would sign any name).
    keys = [path.name for path in tmp_path.iterdir() if b"PRIVATE KEY" in path.read_bytes()]
    assert keys == ["server-key.pem"]
    ca = x509.load_pem_x509_certificate(made.ca_file.read_bytes())
    leaf = x509.load_pem_x509_certificate(made.cert_file.read_bytes())
    for cert in (ca, leaf):
        assert cert.not_valid_after_utc - cert.not_valid_before_utc <= datetime.timedelta(days=398)
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical and constraints.value.excluded_subtrees is None
    permitted = {str(name.value) for name in constraints.value.permitted_subtrees or ()}
    assert permitted == {"localhost", "studio.local", "127.0.0.1/32", "::1/128", "192.168.7.9/32"}
    assert set(made.names) == {"localhost", "studio.local", "127.0.0.1", "::1", "192.168.7.9"}


def test_a_single_label_host_name_is_not_certified(tmp_path):
    # A DNS constraint "dev" would also admit "web.dev": a public domain's names.
    made = self_signed(tmp_path, ("localhost", "dev", "dev.local", "127.0.0.1"))
    assert made.names == ("localhost", "dev.local", "127.0.0.1")


# ---------------------------------------------------------------------- name constraints, verified
def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str) -> None:
    """A TLS handshake between the two contexts in memory: OpenSSL verifies the chain
    exactly as over a socket; an SSLCertVerificationError when the client refuses it."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, to_server, server_hostname=server_hostname)
    server_side = server.wrap_bio(to_server, to_client, server_side=True)
    done: set[str] = set()
    for _ in range(10):
        for name, side in (("client", client_side), ("server", server_side)):
            try:
                side.do_handshake()
                done.add(name)
            except ssl.SSLWantReadError:
                pass
        if done == {"client", "server"}:
            return
    raise AssertionError("the handshake did not finish")


def _served(folder: Path, ca_cert, ca_key, names: tuple[str, ...]) -> ssl.SSLContext:
    """A server context over a certificate for ``names`` signed by ``ca_key``."""
    from cryptography.hazmat.primitives import serialization

    folder.mkdir(parents=True)
    cert, key = sign_server_certificate(ca_cert, ca_key, names)
    (folder / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server-key.pem").write_bytes(private_key_pem(key))
    return server_context(TlsCertificate(folder / "server.pem", folder / "server-key.pem", ""))


def test_the_ca_cannot_vouch_for_another_name_or_address(tmp_path):
    """Even with the CA's key (which Parley drops), a certificate for a name or address
    it was not made for is refused by a client that trusts the CA: the name constraints."""
    from cryptography.hazmat.primitives import serialization

    names = ("localhost", "studio.local", "127.0.0.1", "::1", "192.168.7.9")
    ca_cert, ca_key = make_authority(names, "Parley local CA (test)", 30)
    client = ssl.create_default_context(cadata=ca_cert.public_bytes(serialization.Encoding.PEM).decode())
    real = _served(tmp_path / "real", ca_cert, ca_key, names)
    for name in ("localhost", "studio.local", "127.0.0.1", "::1", "192.168.7.9"):
        _handshake(real, client, name)  # the CA's own names verify
    forged = [("example.com", ("example.com",)), ("www.bank.example", ("www.bank.example",)),
              ("192.168.7.10", ("192.168.7.10",)), ("2001:db8::1", ("2001:db8::1",)),
              ("localhost.example.com", ("localhost.example.com",)),
              ("example.com", ("localhost", "example.com"))]  # hidden beside a permitted name
    for i, (hostname, sans) in enumerate(forged):
        server = _served(tmp_path / f"forged{i}", ca_cert, ca_key, sans)
        with pytest.raises(ssl.SSLCertVerificationError, match="permitted subtree violation"):
            _handshake(server, client, hostname)
    # The same forged certificate from a CA without constraints verifies: the check above
    # fails because of the constraints, not because of how the test connects.
    loose_cert, loose_key = _unconstrained_ca()
    loose = ssl.create_default_context(cadata=loose_cert.public_bytes(serialization.Encoding.PEM).decode())
    _handshake(_served(tmp_path / "loose", loose_cert, loose_key, ("example.com",)), loose, "example.com")


def _unconstrained_ca():
    """A CA as an older Parley made it: no name constraints, ten years."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Parley local CA (old)")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def test_an_older_unconstrained_ca_is_replaced_and_its_key_deleted(tmp_path):
    from cryptography.hazmat.primitives import serialization

    old_cert, old_key = _unconstrained_ca()
    leaf, leaf_key = sign_server_certificate(old_cert, old_key, NAMES)
    (tmp_path / "ca.pem").write_bytes(old_cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "ca-key.pem").write_bytes(private_key_pem(old_key))
    (tmp_path / "server.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server-key.pem").write_bytes(private_key_pem(leaf_key))
    assert "could vouch for any site" in (kept_authority(tmp_path) or pytest.fail()).problem
    replaced = self_signed(tmp_path, NAMES)
    assert replaced.made and not (tmp_path / "ca-key.pem").exists()
    assert "could vouch for any site" in replaced.notes[0] and "remove its profile" in replaced.notes[0]
    now = kept_authority(tmp_path)
    assert now is not None and now.permitted == NAMES and not now.problem


def test_a_certificate_near_its_end_is_renewed_with_a_new_ca_on_start(tmp_path, monkeypatch):
    import engine.server.tls as tls

    monkeypatch.setattr(tls, "CERT_DAYS", tls.RENEW_BEFORE_DAYS - 1)
    old = self_signed(tmp_path, NAMES)
    old_ca = old.ca_file.read_bytes()
    monkeypatch.setattr(tls, "CERT_DAYS", 397)
    renewed = self_signed(tmp_path, NAMES)
    assert renewed.made and renewed.fingerprint != old.fingerprint and renewed.ca_file.read_bytes() != old_ca
    assert "the certificate ends on" in renewed.notes[0]
    assert any("phones must trust the new CA file" in note for note in renewed.notes)
    assert not self_signed(tmp_path, NAMES).made  # and then kept


def test_remove_deletes_every_file(tmp_path):
    folder = tmp_path / "tls"
    self_signed(folder, NAMES)
    (folder / "ca-key.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\nold\n")
    removed = remove(folder)
    assert {path.name for path in removed} == {"ca.pem", "server.pem", "server-key.pem", "ca-key.pem"}
    assert not folder.exists() and remove(folder) == () and kept_authority(folder) is None


def _expired_pair(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(past).not_valid_after(past + datetime.timedelta(days=30))
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "old.pem", folder / "old-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def _encrypted_key(key_file: Path, out: Path) -> Path:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    out.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(b"secret")))
    return out


def test_the_users_own_files_and_what_is_wrong_with_them(tmp_path):
    a, b = self_signed(tmp_path / "a", NAMES), self_signed(tmp_path / "b", NAMES)
    good = resolve_tls(ServerSettings(tls_cert=str(a.cert_file), tls_key=str(a.key_file)))
    assert good is not None and good.fingerprint == a.fingerprint and good.ca_file is None
    missing = tmp_path / "nope.pem"
    binary = tmp_path / "cert.der"
    binary.write_bytes(ssl.PEM_cert_to_DER_cert(a.cert_file.read_text()))
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"")
    old_cert, old_key = _expired_pair(tmp_path)
    cases = [
        ((missing, a.key_file), f"TLS certificate {missing} (--tls-cert): no such file"),
        ((a.cert_file, missing), f"TLS private key {missing} (--tls-key): no such file"),
        ((tmp_path, a.key_file), f"TLS certificate {tmp_path} (--tls-cert) is a folder"),
        ((binary, a.key_file), f"TLS certificate {binary} (--tls-cert) is not a PEM certificate (binary"),
        ((empty, a.key_file), f"TLS certificate {empty} (--tls-cert) is empty"),
        ((a.key_file, a.cert_file), "it holds a private key: are --tls-cert and --tls-key swapped?"),
        ((a.cert_file, b.key_file), f"TLS private key {b.key_file} (--tls-key) does not belong to the "
                                    f"certificate {a.cert_file} (--tls-cert)"),
        ((a.cert_file, _encrypted_key(a.key_file, tmp_path / "locked.pem")),
         "(--tls-key) is encrypted with a passphrase"),
        ((old_cert, old_key), f"TLS certificate {old_cert} (--tls-cert) expired on 2020-01-31"),
    ]
    for (cert, key), message in cases:
        with pytest.raises(ConfigError) as err:
            resolve_tls(ServerSettings(tls_cert=str(cert), tls_key=str(key)))
        assert message in str(err.value), (cert, key, str(err.value))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_key_says_so(tmp_path):
    a = self_signed(tmp_path / "a", NAMES)
    a.key_file.chmod(0)
    with pytest.raises(ConfigError, match=r"\(--tls-key\) cannot be read: permission denied"):
        resolve_tls(ServerSettings(tls_cert=str(a.cert_file), tls_key=str(a.key_file)))


@pytest.mark.parametrize(("flags", "message"), [
    (["--tls-cert", "{cert}"], "--tls-cert needs --tls-key too"),
    (["--tls-key", "{key}"], "--tls-key needs --tls-cert too"),
    (["--tls-self-signed", "--tls-cert", "{cert}", "--tls-key", "{key}"],
     "--tls-self-signed makes its own certificate: pass it alone"),
    (["--tls-cert", "{missing}", "--tls-key", "{key}"],
     "TLS certificate {missing} (--tls-cert): no such file"),
    (["--tls-cert", "{cert}", "--tls-key", "{other_key}"], "(--tls-key) does not belong to the certificate"),
])
def test_bad_tls_flags_exit_2_before_loading_anything(tmp_path, flags, message):
    a, b = self_signed(tmp_path / "a", NAMES), self_signed(tmp_path / "b", NAMES)
    values = {"cert": a.cert_file, "key": a.key_file, "other_key": b.key_file,
              "missing": tmp_path / "missing.pem"}
    result = run_cli("serve", "--port", str(free_port()), *[f.format(**values) for f in flags],
                     timeout=60)
    assert result.returncode == 2, result.stderr
    assert message.format(**values) in result.stderr
    assert "Traceback" not in result.stderr and "models ready" not in result.stderr
