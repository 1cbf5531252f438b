"""The test PKI and self-contained kubeconfigs, with `cryptography`.

Generation is pure computation; `write_pki` and `write_kubeconfig` are the only I/O.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.cpargs import ADVERTISE_ADDRESS, FIRST_SERVICE_IP

SKEW = timedelta(minutes=5)
VALIDITY = timedelta(days=7)
SERVING_IPS = ("127.0.0.1", "::1", FIRST_SERVICE_IP, ADVERTISE_ADDRESS)
SERVING_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
ADMIN_USER = "local-ccm-test-admin"
ADMIN_GROUPS = ("system:masters",)


@dataclass(frozen=True)
class Issued:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def _name(cn: str, orgs: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, now: datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def new_ca(cn: str, now: datetime) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    cert = (
        _builder(_name(cn), _name(cn), key, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def _leaf(
    ca: Issued,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    now: datetime,
    sans: Sequence[x509.GeneralName] = (),
) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key())
    builder = (
        _builder(subject, ca.cert.subject, key, now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(aki, critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def issue_serving(ca: Issued, now: datetime) -> Issued:
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVING_IPS]
    sans += [x509.DNSName(d) for d in SERVING_DNS]
    return _leaf(ca, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, now, sans)


def issue_client(ca: Issued, user: str, groups: Sequence[str], now: datetime) -> Issued:
    """A client certificate: CN is the user name, one O attribute per group."""
    return _leaf(ca, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, now)


@dataclass(frozen=True)
class Pki:
    serving_ca: Issued
    serving: Issued
    client_ca: Issued
    admin: Issued
    sa_key: ec.EllipticCurvePrivateKey


def generate_pki(now: datetime) -> Pki:
    serving_ca = new_ca("local-ccm-test-serving-ca", now)
    client_ca = new_ca("local-ccm-test-client-ca", now)
    return Pki(
        serving_ca=serving_ca,
        serving=issue_serving(serving_ca, now),
        client_ca=client_ca,
        admin=issue_client(client_ca, ADMIN_USER, ADMIN_GROUPS, now),
        sa_key=ec.generate_private_key(ec.SECP256R1()),
    )


@dataclass(frozen=True)
class PkiFiles:
    directory: Path
    serving_ca: Path
    serving_cert: Path
    serving_key: Path
    client_ca: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def write_pki(pki: Pki, directory: Path) -> PkiFiles:
    """Write the PKI into a 0700 directory with 0600 files."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    d = directory
    sa_pem = pki.sa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    sa_pub = pki.sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return PkiFiles(
        directory=d,
        serving_ca=_write_private(d / "serving-ca.crt", pki.serving_ca.cert_pem),
        serving_cert=_write_private(d / "apiserver.crt", pki.serving.cert_pem),
        serving_key=_write_private(d / "apiserver.key", pki.serving.key_pem),
        client_ca=_write_private(d / "client-ca.crt", pki.client_ca.cert_pem),
        admin_cert=_write_private(d / "admin.crt", pki.admin.cert_pem),
        admin_key=_write_private(d / "admin.key", pki.admin.key_pem),
        sa_key=_write_private(d / "sa.key", sa_pem),
        sa_pub=_write_private(d / "sa.pub", sa_pub),
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def render_kubeconfig(
    server: str,
    ca_pem: bytes,
    *,
    user: str,
    client: Issued | None = None,
    token: str | None = None,
) -> str:
    """A self-contained kubeconfig: the CA, client certificate and key embedded as data."""
    creds: dict[str, str] = {}
    if client is not None:
        creds["client-certificate-data"] = _b64(client.cert_pem)
        creds["client-key-data"] = _b64(client.key_pem)
    if token is not None:
        creds["token"] = token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local-ccm-test",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [
            {"name": "local-ccm-test", "context": {"cluster": "local-ccm-test", "user": user}}
        ],
        "current-context": "local-ccm-test",
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_kubeconfig(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write_private(path, text.encode())
