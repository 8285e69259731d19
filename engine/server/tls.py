"""TLS for the realtime server: the user's certificate and key, or one Parley makes.

``resolve_tls(settings)`` is the certificate the server will use (None without TLS) and
``server_context(cert)`` the ``ssl.SSLContext`` it listens with. A file that cannot be
used is a ConfigError naming the flag and the file and saying what is wrong: missing,
unreadable, not PEM, an encrypted key, the key of another certificate, expired.

``--tls-self-signed`` keeps its files under ``<cache>/tls/``
(``engine.runtime.paths.cache_dir``):

- ``ca.pem``: a local certificate authority that clients (and phones) trust. It can vouch
  only for the names and addresses it was made for (``engine.server.local_ca``: name
  constraints), and its private key never touches the disk: it signs the one server
  certificate and is dropped, so a copy of this folder lets no one vouch for another site.
  A CA rather than one self-signed certificate: strict verifiers (Python 3.13's default
  context) refuse a server certificate as its own trust anchor.
- ``server.pem`` and ``server-key.pem`` (owner-only, 0600): the server's certificate for
  this machine's names (``machine_names``), valid as long as the CA (``CERT_DAYS``).

The kept files are used as they are. A new CA and certificate are made, and
``TlsCertificate.notes`` says that phones must trust the new ``ca.pem``, the first time,
within ``RENEW_BEFORE_DAYS`` of the end, when the files are damaged, and in place of an
older Parley's CA (no name constraints, its key kept in ``ca-key.pem``, which is
overwritten and deleted). A name the machine gained since (a new LAN address) is not
added by itself, since phones would have to trust a new CA each time: the notes name it
and ``rotate`` (``parley-cli tls rotate``) makes a new CA for the current names;
``remove`` (``parley-cli tls remove``) deletes the files; ``kept_authority`` describes
them (``parley-cli tls show``).

Making certificates, and reading a certificate's dates, needs ``cryptography`` (in the
``server`` extra); loading the user's own files needs only ``ssl``.
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
CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "server.pem", "server-key.pem"
OLD_CA_KEY_FILE = "ca-key.pem"  # an older Parley kept its CA's key here
# The CA and its one server certificate live as long: a certificate cannot outlive its CA,
# and a shorter one would need the CA's key again. 397 days: within what Apple accepts of
# a server certificate (825 days for a CA the user added, 398 for public ones), and a
# stolen server key stops working within about a year.
CERT_DAYS = 397
RENEW_BEFORE_DAYS = 30
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*$")
_PHONES = "README, \"A phone needs HTTPS\""


@dataclass(frozen=True)
class TlsCertificate:
    """The certificate a server listens with, and what a client needs to trust it."""

    cert_file: Path
    key_file: Path
    fingerprint: str  # SHA-256 of the server certificate (DER), as AA:BB:...
    ca_file: Path | None = None  # self-signed: Parley's local CA; None for the user's own files
    names: tuple[str, ...] = ()  # self-signed: the names and addresses it is valid for
    made: bool = False  # made by this call (first use, renewal, or rotate)
    notes: tuple[str, ...] = ()  # self-signed: what the user must know or do (a new CA to trust)


@dataclass(frozen=True)
class KeptAuthority:
    """The files ``--tls-self-signed`` keeps in a folder, read (``kept_authority``)."""

    folder: Path
    ca_file: Path
    cert_file: Path
    key_file: Path
    ca_name: str  # the CA's common name: how a phone lists its profile
    ca_fingerprint: str  # SHA-256 of ca.pem, as a phone shows it
    fingerprint: str  # SHA-256 of the server certificate
    names: tuple[str, ...]  # the server certificate's names and addresses
    permitted: tuple[str, ...] | None  # what the CA may vouch for; None: an older, unconstrained CA
    expires: datetime.datetime  # the end of the server certificate (and of the CA)
    old_ca_key: bool  # an older Parley's ca-key.pem is still there
    problem: str  # why the next start replaces these files; "" when it uses them as they are


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
    """The kept self-signed certificate, or a new CA and certificate for ``names`` (default
    ``machine_names()``) when there is none, it ends within ``RENEW_BEFORE_DAYS``, it is
    damaged or its CA is an older, unconstrained one (see the module)."""
    folder = tls_folder() if folder is None else folder
    _require_crypto()
    wanted = _certifiable(names)
    kept = _inspect(folder)
    if isinstance(kept, KeptAuthority) and not kept.problem:
        uncovered = tuple(name for name in wanted if name not in kept.names)
        notes = () if not uncovered else (
            f"TLS: this machine also answers to {', '.join(uncovered)}, which the certificate "
            "does not cover (it names what the machine answered to when it was made); "
            "`parley-cli tls rotate` makes a new CA for the current names (phones must then "
            "trust the new ca.pem)",)
        return TlsCertificate(kept.cert_file, kept.key_file, kept.fingerprint, kept.ca_file,
                              kept.names, notes=notes)
    older = (folder / OLD_CA_KEY_FILE).exists() or (isinstance(kept, KeptAuthority)
                                                   and kept.permitted is None)
    made, ca_name = _make(folder, wanted)
    if kept is None:
        why = "TLS: made a CA that can vouch only for this certificate's names"
    elif older:
        old_name = kept.ca_name if isinstance(kept, KeptAuthority) else "Parley local CA"
        why = (f"TLS: replaced the CA \"{old_name}\", which could vouch "
               "for any site, and deleted its private key: remove its profile from every phone "
               "that trusts it")
    else:
        why = (f"TLS: made a new CA and certificate ({kept if isinstance(kept, str) else kept.problem}): "
               "phones can remove the old CA's profile")
    notes = (why, f"TLS: phones must trust the new CA file {made.ca_file}, {ca_name} "
                  f"({_PHONES}); its private key was not kept")
    return TlsCertificate(made.cert_file, made.key_file, made.fingerprint, made.ca_file,
                          made.names, made=True, notes=notes)


def rotate(folder: Path | None = None, names: tuple[str, ...] | None = None) -> TlsCertificate:
    """A new CA and certificate for ``names`` (default ``machine_names()``) in place of
    the kept ones, whatever their state; the old server key is deleted."""
    folder = tls_folder() if folder is None else folder
    _require_crypto()
    return _make(folder, _certifiable(names))[0]


def remove(folder: Path | None = None) -> tuple[Path, ...]:
    """Delete the files ``--tls-self-signed`` keeps in ``folder`` (keys overwritten first);
    the ones that were there. The folder goes too when nothing else is in it."""
    folder = tls_folder() if folder is None else folder
    removed: list[Path] = []
    try:
        for name in (KEY_FILE, OLD_CA_KEY_FILE):
            if _delete_private(folder / name):
                removed.append(folder / name)
        for name in (CERT_FILE, CA_FILE):
            if (folder / name).exists():
                (folder / name).unlink()
                removed.append(folder / name)
        for name in (CA_FILE, CERT_FILE, KEY_FILE, OLD_CA_KEY_FILE):
            (folder / f"{name}.tmp").unlink(missing_ok=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    except OSError as exc:
        raise ConfigError(f"cannot delete the TLS files in {folder}: {exc.strerror or exc}") from None
    return tuple(removed)


def kept_authority(folder: Path | None = None) -> KeptAuthority | None:
    """The CA and certificate kept in ``folder`` (default ``<cache>/tls``); None when
    there are none; ConfigError when they are incomplete or damaged."""
    folder = tls_folder() if folder is None else folder
    _require_crypto()
    kept = _inspect(folder)
    if isinstance(kept, str):
        raise ConfigError(f"the TLS files in {folder} cannot be used: {kept}; `parley-cli tls "
                          "rotate` makes new ones (phones must then trust the new ca.pem)")
    return kept


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


def _certifiable(names: tuple[str, ...] | None) -> tuple[str, ...]:
    """``names`` (default ``machine_names()``) a certificate of the local CA may carry."""
    from engine.server.local_ca import certifiable_names

    wanted = certifiable_names(machine_names() if names is None else names)
    if not wanted:
        raise ConfigError(f"--tls-self-signed has no name to certify among {', '.join(names or ())}: "
                          "a single-label host name is not certified (its subdomains could be "
                          "anyone's names)")
    return wanted


def _inspect(folder: Path) -> KeptAuthority | str | None:
    """The kept files read; None when there are none; why they cannot be read, when not."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    from engine.server.local_ca import certificate_names, common_name, permitted_names

    ca_file, cert_file, key_file = folder / CA_FILE, folder / CERT_FILE, folder / KEY_FILE
    old_ca_key = (folder / OLD_CA_KEY_FILE).exists()
    present = [path.name for path in (ca_file, cert_file, key_file) if path.exists()]
    if not present and not old_ca_key:
        return None
    missing = [path.name for path in (ca_file, cert_file, key_file) if not path.exists()]
    if missing:
        return f"{' and '.join(missing)} missing"
    try:
        ca_pem, pem = ca_file.read_bytes(), cert_file.read_bytes()
        ca, cert = x509.load_pem_x509_certificate(ca_pem), x509.load_pem_x509_certificate(pem)
        cert.verify_directly_issued_by(ca)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except (ValueError, TypeError, InvalidSignature):
        return f"{CERT_FILE} is damaged or not signed by {CA_FILE}"
    permitted = permitted_names(ca)
    expires = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    problem = ""
    if permitted is None or old_ca_key:
        problem = "an older Parley's CA, which could vouch for any site"
    elif expires < datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=RENEW_BEFORE_DAYS):
        problem = f"the certificate ends on {expires:%Y-%m-%d}"
    return KeptAuthority(folder, ca_file, cert_file, key_file, common_name(ca), fingerprint(ca_pem),
                         fingerprint(pem), certificate_names(cert), permitted, expires, old_ca_key,
                         problem)


def _make(folder: Path, names: tuple[str, ...]) -> tuple[TlsCertificate, str]:
    """A new CA and server certificate for ``names`` written in ``folder``, replacing any;
    with the CA's name and fingerprint, as a phone shows them."""
    from cryptography.hazmat.primitives import serialization

    from engine.server.local_ca import make_authority, private_key_pem, sign_server_certificate

    now = datetime.datetime.now(datetime.UTC)
    label = f"Parley local CA ({_short_host()}, {now:%Y-%m-%d %H:%M:%S} UTC)"  # tells profiles apart
    ca_cert, ca_key = make_authority(names, label, CERT_DAYS)
    cert, key = sign_server_certificate(ca_cert, ca_key, names)
    del ca_key  # it has signed its one certificate: never written, and dropped here
    pem = cert.public_bytes(serialization.Encoding.PEM)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    ca_file, cert_file, key_file = folder / CA_FILE, folder / CERT_FILE, folder / KEY_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _delete_private(folder / OLD_CA_KEY_FILE)
        _delete_private(key_file)
        _write(key_file, private_key_pem(key), private=True)
        _write(cert_file, pem)
        _write(ca_file, ca_pem)
    except OSError as exc:
        raise ConfigError(f"--tls-self-signed cannot write its certificate in {folder}: "
                          f"{exc.strerror or exc} (set PARLEY_CACHE_DIR to a writable folder)") from None
    ca_name = f"\"{label}\", SHA-256 {fingerprint(ca_pem)}"
    return TlsCertificate(cert_file, key_file, fingerprint(pem), ca_file, names, made=True), ca_name


def _delete_private(path: Path) -> bool:
    """Overwrite the private key at ``path`` with zeros and delete it; False when absent.
    (Best effort: a copy-on-write file system or an SSD may keep the old blocks.)"""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    try:
        with open(path, "r+b") as f:
            f.write(b"\0" * size)
            f.flush()
            os.fsync(f.fileno())
    except PermissionError:
        pass  # a read-only key the owner can still delete: deleting is what matters
    path.unlink()
    return True


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
