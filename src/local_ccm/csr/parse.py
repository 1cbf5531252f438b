"""`spec.request` (PEM, or DER) to a `Request`, with `cryptography`. Imported lazily: the
controller manager pays for `cryptography` only when this controller runs."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from local_ccm.csr.core.model import KeyKind, Request

_PEM_MARK = b"-----BEGIN CERTIFICATE REQUEST-----"
# Subject attributes by OID, named as `openssl req -noout -subject` names them (OpenSSL 3.0), so
# that a denial reads `OU=hackers`; an OID OpenSSL does not name either stays dotted.
SHORT_NAMES: Mapping[str, str] = MappingProxyType({
    "2.5.4.3": "CN", "2.5.4.4": "SN", "2.5.4.5": "serialNumber", "2.5.4.6": "C",
    "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.9": "street", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.12": "title", "2.5.4.15": "businessCategory", "2.5.4.16": "postalAddress",
    "2.5.4.17": "postalCode", "2.5.4.42": "GN", "2.5.4.43": "initials",
    "2.5.4.44": "generationQualifier", "2.5.4.45": "x500UniqueIdentifier",
    "2.5.4.46": "dnQualifier", "2.5.4.65": "pseudonym", "2.5.4.97": "organizationIdentifier",
    "0.9.2342.19200300.100.1.1": "UID", "0.9.2342.19200300.100.1.25": "DC",
    "1.2.840.113549.1.9.1": "emailAddress", "1.2.840.113549.1.9.2": "unstructuredName",
    "1.3.6.1.4.1.311.60.2.1.1": "jurisdictionL", "1.3.6.1.4.1.311.60.2.1.2": "jurisdictionST",
    "1.3.6.1.4.1.311.60.2.1.3": "jurisdictionC", "1.2.643.3.131.1.1": "INN",
    "1.2.643.100.1": "OGRN", "1.2.643.100.3": "SNILS",
})  # fmt: skip


def parse_request(data: bytes) -> Request | None:
    """The parsed request, or None when `data` is not one PKCS#10 request."""
    from cryptography import x509  # noqa: PLC0415 (lazy: see the module docstring)
    from cryptography.exceptions import UnsupportedAlgorithm  # noqa: PLC0415

    try:
        load = x509.load_pem_x509_csr if _PEM_MARK in data else x509.load_der_x509_csr
        return _request(load(data))
    except (ValueError, TypeError, UnsupportedAlgorithm, x509.DuplicateExtension,
            x509.UnsupportedGeneralNameType):  # fmt: skip
        # The last two: a SAN extension given twice, a SAN of a type cryptography cannot
        # read (x400Address, ediPartyName). Go's x509 reads both; denied here, never retried.
        return None


def _request(loaded: Any) -> Request:
    from cryptography import x509  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    subject = loaded.subject
    common = tuple(str(a.value) for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME))
    orgs = tuple(str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    known = {NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME}
    other = tuple(f"{_short(a.oid.dotted_string)}={a.value!s}" for a in subject
                  if a.oid not in known)  # fmt: skip
    try:
        sans = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    kind, size, curve = _key(loaded.public_key())
    return Request(
        common_names=common, organizations=orgs, other_subject=other,
        dns_names=tuple(sans.get_values_for_type(x509.DNSName)),
        ip_addresses=tuple(sans.get_values_for_type(x509.IPAddress)),
        emails=tuple(sans.get_values_for_type(x509.RFC822Name)),
        uris=tuple(sans.get_values_for_type(x509.UniformResourceIdentifier)),
        key_kind=kind, key_size=size, curve=curve,
        signature_valid=loaded.is_signature_valid,
    )  # fmt: skip


def _key(key: Any) -> tuple[KeyKind, int, str]:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa  # noqa: PLC0415

    if isinstance(key, rsa.RSAPublicKey):
        return "rsa", key.key_size, ""
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "ecdsa", key.curve.key_size, key.curve.name
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519", 256, ""
    return "other", 0, ""


def _short(oid: str) -> str:
    return SHORT_NAMES.get(oid, oid)
