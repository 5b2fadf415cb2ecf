"""A test certificate authority for the broker's TLS listener, made at the broker's start (Python `cryptography`):
the CA clients trust, the broker's PEM keystore (unencrypted PKCS#8 key and its certificate chain, which Kafka reads
with `ssl.keystore.type=PEM`), and a second CA that signed nothing, for the untrusted-certificate case."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class Certificates:
    ca: Path
    """The CA that signed the broker's certificate: a client's `ssl_cafile`."""
    keystore: Path
    """The broker's key and certificate chain (PEM)."""
    other_ca: Path
    """A CA that signed nothing the broker presents: a client trusting only it must refuse the broker."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, ca: bool
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def make_certificates(directory: Path) -> Certificates:
    """A CA, the broker's certificate for 127.0.0.1 and localhost signed by it, and an unrelated CA."""
    ca_key, broker_key, other_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("recluster test CA", ca_key, "recluster test CA", ca_key, ca=True)
    broker = _certificate("127.0.0.1", broker_key, "recluster test CA", ca_key, ca=False)
    other = _certificate("another CA", other_key, "another CA", other_key, ca=True)
    paths = Certificates(directory / "ca.pem", directory / "broker-keystore.pem", directory / "other-ca.pem")
    paths.ca.write_bytes(_pem(ca))
    paths.other_ca.write_bytes(_pem(other))
    key = broker_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    paths.keystore.write_bytes(key + _pem(broker) + _pem(ca))
    return paths
