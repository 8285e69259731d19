"""TLS for the realtime server: the user's certificate and key, or one Parley makes.

``resolve_tls(settings)`` is the certificate the server will use (None without TLS) and
``server_context(cert)`` the ``ssl.SSLContext`` it listens with. A file that cannot be
used is a ConfigError naming the flag and the file and saying what is wrong: missing,
unreadable, not PEM, an encrypted key, the key of another certificate, expired.

``--tls-self-signed`` keeps its files under ``<cache>/tls/``
(``engine.runtime.paths.cache_dir``):

- ``ca.pem`` and ``ca-key.pem``: a local certificate authority, made once. A client
  trusts the server by passing ``ca.pem`` as its CA file. A CA rather than one
  self-signed certificate: strict verifiers (Python 3.13's default context) refuse a
  server certificate as its own trust anchor, and a kept CA can sign a new server
  certificate without every client having to trust it again.
- ``server.pem`` and ``server-key.pem``: the server's certificate, signed by that CA, for
  this machine's names (``machine_names``). Made again, by the same CA, when those names
  changed (a new LAN address) or it expires within ``RENEW_BEFORE_DAYS``.

Keys are written owner-only (0600). Making certificates, and reading a certificate's
dates, needs ``cryptography`` (in the ``server`` extra); loading the user's own files
needs only ``ssl``.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import re
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ConfigError, MissingDependencyError

if TYPE_CHECKING:
    from engine.server.server_settings import ServerSettings

TLS_FOLDER = "tls"
CA_DAYS = 3650
SERVER_DAYS = 397  # the longest server certificate current browsers and Apple's TLS accept
RENEW_BEFORE_DAYS = 30
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*$")


@dataclass(frozen=True)
class TlsCertificate:
    """The certificate a server listens with, and what a client needs to trust it."""

    cert_file: Path
    key_file: Path
    fingerprint: str  # SHA-256 of the server certificate (DER), as AA:BB:...
    ca_file: Path | None = None  # self-signed: Parley's local CA; None for the user's own files
    names: tuple[str, ...] = ()  # self-signed: the names and addresses it is valid for
    made: bool = False  # made by this call (first use, or the machine's names changed)


def resolve_tls(settings: ServerSettings, folder: Path | None = None) -> TlsCertificate | None:
    """The certificate ``settings`` asks for, checked (or made); None without TLS.
    ``folder``: where a self-signed certificate is kept (default ``<cache>/tls``)."""
    if settings.tls_self_signed:
        return self_signed(folder)
    if not settings.tls:
        return None
    cert, key = Path(settings.tls_cert or ""), Path(settings.tls_key or "")
    server_context(TlsCertificate(cert, key, ""))  # the pair must load together
    _check_dates(cert)
    return TlsCertificate(cert, key, fingerprint(cert.read_bytes()))


def server_context(cert: TlsCertificate) -> ssl.SSLContext:
    """The server-side SSLContext over ``cert``'s files; ConfigError saying which is wrong."""
    cert_pem = _read(cert.cert_file, "--tls-cert", "certificate")
    key_pem = _read(cert.key_file, "--tls-key", "private key")
    if not _PEM_CERT.search(cert_pem):
        raise ConfigError(_not_pem(cert.cert_file, "--tls-cert", "certificate", cert_pem,
                                   "-----BEGIN CERTIFICATE-----"))
    if b"PRIVATE KEY-----" not in key_pem:
        raise ConfigError(_not_pem(cert.key_file, "--tls-key", "private key", key_pem,
                                   "-----BEGIN PRIVATE KEY-----"))
    if b"ENCRYPTED" in key_pem:
        raise ConfigError(f"TLS private key {cert.key_file} (--tls-key) is encrypted with a "
                          "passphrase, which the server cannot ask for: decrypt it (e.g. openssl "
                          "pkey -in KEY -out KEY.plain) and keep the copy owner-only")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # The password callback answers any passphrase prompt: OpenSSL must never read the
        # terminal of a server.
        context.load_cert_chain(cert.cert_file, cert.key_file, password=lambda: b"")
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if "KEY_VALUES_MISMATCH" in reason.upper():
            raise ConfigError(f"TLS private key {cert.key_file} (--tls-key) does not belong to "
                              f"the certificate {cert.cert_file} (--tls-cert): pass the key the "
                              "certificate was made for") from None
        raise ConfigError(f"cannot use the TLS certificate {cert.cert_file} (--tls-cert) with "
                          f"the key {cert.key_file} (--tls-key): {reason}") from None
    except OSError as exc:  # read between the checks above and here: say what the OS said
        raise ConfigError(f"cannot read the TLS files {cert.cert_file} and {cert.key_file}: "
                          f"{exc.strerror or exc}") from None
    return context


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 fingerprint of the first certificate in ``cert_pem``, as AA:BB:..."""
    found = _PEM_CERT.search(cert_pem)
    if found is None:
        raise ConfigError("no PEM certificate (-----BEGIN CERTIFICATE-----) in the data")
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(found.group().decode("ascii"))).hexdigest()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2)).upper()


def tls_folder() -> Path:
    """Where ``--tls-self-signed`` keeps its CA and certificate."""
    from engine.runtime.paths import cache_dir

    return cache_dir() / TLS_FOLDER


def machine_names() -> tuple[str, ...]:
    """The names and addresses this machine answers to: localhost, the host name (and
    NAME.local for mDNS), 127.0.0.1, ::1 and every LAN address of its interfaces (not
    link-local ones: they need a zone a certificate cannot name)."""
    import psutil

    names = ["localhost"]
    host = socket.gethostname().strip().rstrip(".")
    if host and _HOST_NAME.match(host) and host.lower() != "localhost":
        names.append(host)
        if "." not in host:
            names.append(f"{host}.local")
    names += ["127.0.0.1", "::1"]
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                ip = ipaddress.ip_address(address.address.split("%", 1)[0])
            except ValueError:
                continue
            if not (ip.is_link_local or ip.is_loopback or ip.is_multicast or ip.is_unspecified):
                names.append(str(ip))
    return tuple(dict.fromkeys(names))


def self_signed(folder: Path | None = None, names: tuple[str, ...] | None = None) -> TlsCertificate:
    """The kept self-signed certificate for ``names`` (default ``machine_names()``), made
    (with its CA, the first time) when there is none, it misses a name or it expires soon."""
    folder = tls_folder() if folder is None else folder
    names = machine_names() if names is None else names
    _require_crypto()
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_file, ca_key_file = folder / "ca.pem", folder / "ca-key.pem"
    cert_file, key_file = folder / "server.pem", folder / "server-key.pem"
    kept = _kept_certificate(cert_file, key_file, ca_file, names)
    if kept is not None:
        return TlsCertificate(cert_file, key_file, fingerprint(kept), ca_file, names)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if ca_file.exists() and ca_key_file.exists():
            ca_cert = x509.load_pem_x509_certificate(ca_file.read_bytes())
            ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        else:
            ca_cert, ca_key = _make_ca()
            _write(ca_key_file, _key_pem(ca_key), private=True)
            _write(ca_file, ca_cert.public_bytes(serialization.Encoding.PEM))
        cert, key = _make_server_cert(ca_cert, ca_key, names)
        _write(key_file, _key_pem(key), private=True)
        pem = cert.public_bytes(serialization.Encoding.PEM)
        _write(cert_file, pem)
    except OSError as exc:
        raise ConfigError(f"--tls-self-signed cannot write its certificate in {folder}: "
                          f"{exc.strerror or exc} (set PARLEY_CACHE_DIR to a writable folder)") from None
    except ValueError as exc:  # a kept CA file that is damaged
        raise ConfigError(f"--tls-self-signed cannot read its CA in {folder} ({exc}): delete "
                          f"{ca_file} and {ca_key_file} to make a new one (clients must then "
                          "trust the new ca.pem)") from None
    return TlsCertificate(cert_file, key_file, fingerprint(pem), ca_file, names, made=True)


# ---------------------------------------------------------------------- helpers
def _require_crypto() -> None:
    """MissingDependencyError (with the pip command) unless ``cryptography`` is installed."""
    import importlib.util

    if importlib.util.find_spec("cryptography") is None:
        raise MissingDependencyError("--tls-self-signed", "cryptography", "server")


def _read(path: Path, flag: str, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"TLS {what} {path} ({flag}): no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"TLS {what} {path} ({flag}) is a folder; name the PEM file") from None
    except PermissionError:
        raise ConfigError(f"TLS {what} {path} ({flag}) cannot be read: permission denied "
                          "(the server runs as this user)") from None
    except OSError as exc:
        raise ConfigError(f"TLS {what} {path} ({flag}) cannot be read: "
                          f"{exc.strerror or exc}") from None


def _not_pem(path: Path, flag: str, what: str, data: bytes, header: str) -> str:
    if not data.strip():
        return f"TLS {what} {path} ({flag}) is empty"
    kind = "binary (DER?) data" if b"\0" in data or not data.isascii() else "no PEM block"
    swapped = ""
    if flag == "--tls-cert" and b"PRIVATE KEY-----" in data:
        swapped = "; it holds a private key: are --tls-cert and --tls-key swapped?"
    elif flag == "--tls-key" and _PEM_CERT.search(data):
        swapped = "; it holds a certificate: are --tls-cert and --tls-key swapped?"
    return f"TLS {what} {path} ({flag}) is not a PEM {what} ({kind}, expected {header}){swapped}"


def _check_dates(path: Path) -> None:
    """ConfigError for a certificate outside its dates, when ``cryptography`` can read them
    (without it the clients' own check says so)."""
    try:
        from cryptography import x509
    except ImportError:
        return
    found = _PEM_CERT.search(path.read_bytes())
    if found is None:
        return
    cert = x509.load_pem_x509_certificate(found.group())
    now = datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        raise ConfigError(f"TLS certificate {path} (--tls-cert) expired on "
                          f"{cert.not_valid_after_utc:%Y-%m-%d}: renew it")
    if cert.not_valid_before_utc > now:
        raise ConfigError(f"TLS certificate {path} (--tls-cert) is not valid before "
                          f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC: check this machine's clock")


def _kept_certificate(cert_file: Path, key_file: Path, ca_file: Path,
                      names: tuple[str, ...]) -> bytes | None:
    """The kept server certificate's PEM if it can be used as it is; None to make one."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    try:
        pem = cert_file.read_bytes()
        key_file.stat()
        cert = x509.load_pem_x509_certificate(pem)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_file.read_bytes()))
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return None  # missing, damaged, or not signed by the kept CA: make it again
    covered = {n.lower() for n in sans.get_values_for_type(x509.DNSName)}
    covered |= {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    if not {n.lower() for n in names} <= covered:
        return None
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=RENEW_BEFORE_DAYS)
    return pem if cert.not_valid_after_utc > soon else None


def _make_ca():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                         f"Parley local CA ({_short_host()})")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _make_server_cert(ca_cert, ca_key, names: tuple[str, ...]):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    alt: list = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write ``data`` whole (a temporary file renamed over ``path``), owner-only if private."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # os.open's mode applies only to a file it creates
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _short_host() -> str:
    host = socket.gethostname().strip()
    return host if host and _HOST_NAME.match(host) else "this machine"
