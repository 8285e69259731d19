"""The certificates of ``--tls-self-signed``, built in memory (``engine.server.tls`` keeps
the files).

``make_authority(names)`` is a certificate authority that can vouch only for ``names``:
a critical NameConstraints extension permits exactly those DNS names and addresses (each
address as a /32 or /128 network), so a certificate it signs for any other name or
address fails verification (OpenSSL, browsers and phones enforce it), and its
ExtendedKeyUsage limits it to TLS servers. ``sign_server_certificate`` is the server
certificate it signs. The CA's private key is returned to the caller, which signs with it
once and drops it: nothing here writes a file.

A DNS constraint also admits the name's subdomains (RFC 5280 4.2.1.10): "localhost"
admits "x.localhost". So ``certifiable_names`` leaves out a single-label host name
("studio", "dev"), whose subdomains could be anyone's names under a public top-level
domain; NAME.local and a fully qualified host name stay (their subdomains are this
machine's own). The leading-dot form that would exclude subdomains is not used: Java's
(Android's) certificate parser rejects it, which would refuse the whole chain.
"""

from __future__ import annotations

import datetime
import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey


def certifiable_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` a certificate of this CA may carry, in order, duplicates dropped: every
    address, and every DNS name but a single-label one other than localhost."""
    kept: list[str] = []
    for name in names:
        name = name.strip().rstrip(".").lower()
        try:
            name = str(ipaddress.ip_address(name))
        except ValueError:
            if "." not in name and name != "localhost":
                continue
        if name and name not in kept:
            kept.append(name)
    return tuple(kept)


def make_authority(names: tuple[str, ...], label: str, days: int
                   ) -> tuple[x509.Certificate, EllipticCurvePrivateKey]:
    """A CA valid for ``days`` that can vouch only for ``names`` (see the module), and its
    private key. ``label``: the CA's name as a phone lists it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not names:
        raise ValueError("a CA needs at least one name to vouch for")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, label)])
    now = datetime.datetime.now(datetime.UTC)
    permitted = [_general_name(name, as_network=True) for name in names]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.NameConstraints(permitted_subtrees=permitted,
                                                excluded_subtrees=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def sign_server_certificate(ca_cert: x509.Certificate, ca_key: EllipticCurvePrivateKey,
                            names: tuple[str, ...]
                            ) -> tuple[x509.Certificate, EllipticCurvePrivateKey]:
    """A server certificate for ``names`` signed by ``ca_cert``'s key, valid as long as
    the CA (its key is not kept to sign another), and its private key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(ca_cert.not_valid_after_utc)
            .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]),
                           critical=False)
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


def permitted_names(ca_cert: x509.Certificate) -> tuple[str, ...] | None:
    """The names and addresses ``ca_cert`` may vouch for (its permitted subtrees, an
    address network written as its address); None when it has no name constraints."""
    from cryptography import x509

    try:
        constraints = ca_cert.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return None
    names: list[str] = []
    for subtree in constraints.permitted_subtrees or ():
        if isinstance(subtree, x509.IPAddress) and isinstance(
                subtree.value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            net = subtree.value
            names.append(str(net.network_address) if net.num_addresses == 1 else str(net))
        elif isinstance(subtree, x509.DNSName):
            names.append(subtree.value)
    return tuple(names)


def certificate_names(cert: x509.Certificate) -> tuple[str, ...]:
    """The DNS names and addresses of ``cert``'s SubjectAlternativeName, in its order."""
    from cryptography import x509

    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(name.value).lower() for name in sans
                 if isinstance(name, (x509.DNSName, x509.IPAddress)))


def common_name(cert: x509.Certificate) -> str:
    """``cert``'s subject common name ("" without one)."""
    from cryptography.x509.oid import NameOID

    found = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(found[0].value) if found else ""


def private_key_pem(key: EllipticCurvePrivateKey) -> bytes:
    """``key`` as unencrypted PKCS#8 PEM (the server reads it without a passphrase)."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _general_name(name: str, *, as_network: bool = False) -> x509.GeneralName:
    """``name`` as an IPAddress (a one-address network for a constraint) or a DNSName."""
    from cryptography import x509

    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return x509.DNSName(name)
    return x509.IPAddress(ipaddress.ip_network(address) if as_network else address)
