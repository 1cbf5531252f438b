"""kubelet serving certificate requests built with `cryptography`, as a kubelet would make
them (and wrong in the ways the approver must catch)."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

SIGNER = "kubernetes.io/kubelet-serving"
KUBELET_USAGES = ["digital signature", "server auth"]  # ECDSA: the kubelet's own request
RSA_USAGES = ["digital signature", "key encipherment", "server auth"]
Key = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def ec_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def request_pem(
    node: str,
    *,
    ips: Sequence[str] = (),
    dns: Sequence[str] = (),
    emails: Sequence[str] = (),
    uris: Sequence[str] = (),
    cn: str | None = None,
    orgs: Sequence[str] = ("system:nodes",),
    units: Sequence[str] = (),
    key: Key | None = None,
) -> bytes:
    """A PEM PKCS#10 request for `node`'s serving certificate (`units`: OU attributes)."""
    key = key or ec_key()
    names = [x509.NameAttribute(NameOID.COMMON_NAME, cn or f"system:node:{node}")]
    names += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    names += [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, u) for u in units]
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    sans += [x509.DNSName(d) for d in dns] + [x509.RFC822Name(e) for e in emails]
    sans += [x509.UniformResourceIdentifier(u) for u in uris]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM)


def csr_object(
    name: str,
    pem: bytes,
    usages: Sequence[str] = KUBELET_USAGES,
    expiration_seconds: int | None = None,
) -> dict[str, Any]:
    """The CertificateSigningRequest a kubelet creates (spec.username is the server's)."""
    spec: dict[str, Any] = {"signerName": SIGNER, "usages": list(usages),
                            "request": base64.b64encode(pem).decode()}  # fmt: skip
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }
