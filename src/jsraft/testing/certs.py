"""Throw-away TLS certificates for tests, made at test time (never committed): a CA and the leaf
certificates it signs, written as PEM files into a test's temporary directory.

Owns: `TestCa` (a self-signed CA, P-256 keys: fast to generate) and `TestCa.issue` (a leaf for
`127.0.0.1`/`localhost`, usable as server and client certificate; optionally already expired).

Invariants:
  1. Keys exist only in the directory given (a test's tmp_path); nothing here is written elsewhere.
  2. A leaf's validity window is explicit: `expired=True` makes one that ended an hour ago, so a
     verifier must refuse it by date alone.

Imports: stdlib, cryptography. Never imported by production code.
"""

from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: str) -> None:
    with open(path, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _write_cert(cert: x509.Certificate, path: str) -> None:
    with open(path, "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))


class TestCa:
    """A CA in `directory`: `ca_file` is its certificate (what verifiers load)."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | os.PathLike[str], name: str = "jsraft test CA") -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        slug = name.replace(" ", "-")
        self.ca_file = os.path.join(self.directory, f"{slug}.pem")
        _write_cert(self.cert, self.ca_file)

    def issue(self, name: str, *, expired: bool = False) -> tuple[str, str]:
        """(cert_file, key_file) of a leaf for `name`, valid for 127.0.0.1 and localhost (invariant 2)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (now - datetime.timedelta(days=2), now - datetime.timedelta(hours=1)) if expired else \
            (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=7))
        sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_file = os.path.join(self.directory, f"{name}-cert.pem")
        key_file = os.path.join(self.directory, f"{name}-key.pem")
        _write_cert(cert, cert_file)
        _write_key(key, key_file)
        return cert_file, key_file
