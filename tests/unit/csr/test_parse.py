"""Parsing requests made with `cryptography`: subject, SANs, key and self-signature."""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509 import load_pem_x509_csr
from cryptography.x509.oid import NameOID, ObjectIdentifier

from local_ccm.csr.parse import parse_request
from tests.support.csrs import request_pem


def test_a_kubelet_request_parses_to_its_subject_sans_and_key() -> None:
    pem = request_pem("n1", ips=["192.0.2.10"], dns=["n1"])
    req = parse_request(pem)
    assert req is not None
    assert (req.common_names, req.organizations) == (("system:node:n1",), ("system:nodes",))
    assert req.ip_addresses == (ipaddress.ip_address("192.0.2.10"),)
    assert req.dns_names == ("n1",)
    assert (req.key_kind, req.curve, req.signature_valid) == ("ecdsa", "secp256r1", True)


def test_der_parses_as_well_as_pem() -> None:
    pem = request_pem("n1", dns=["n1"])
    der = load_pem_x509_csr(pem).public_bytes(serialization.Encoding.DER)
    assert parse_request(der) == parse_request(pem)


def test_email_uri_and_extra_subject_attributes_are_reported() -> None:
    req = parse_request(request_pem("n1", emails=["a@example.com"], uris=["spiffe://x"],
                                    orgs=("system:nodes", "extra")))  # fmt: skip
    assert req is not None
    assert (req.emails, req.uris) == (("a@example.com",), ("spiffe://x",))
    assert req.organizations == ("system:nodes", "extra")


def test_rsa_and_ed25519_keys_are_told_apart() -> None:
    rsa_req = parse_request(
        request_pem("n1", dns=["n1"], key=rsa.generate_private_key(65537, 2048))
    )
    ed_req = parse_request(request_pem("n1", dns=["n1"], key=ed25519.Ed25519PrivateKey.generate()))
    p384 = parse_request(request_pem("n1", dns=["n1"], key=ec.generate_private_key(ec.SECP384R1())))
    assert rsa_req is not None
    assert (rsa_req.key_kind, rsa_req.key_size) == ("rsa", 2048)
    assert ed_req is not None
    assert ed_req.key_kind == "ed25519"
    assert p384 is not None
    assert p384.curve == "secp384r1"


def test_a_tampered_request_has_an_invalid_self_signature() -> None:
    der = bytearray(load_pem_x509_csr(request_pem("n1", dns=["n1"]))
                    .public_bytes(serialization.Encoding.DER))  # fmt: skip
    der[-1] ^= 0x01  # inside the signature value
    req = parse_request(bytes(der))
    assert req is None or not req.signature_valid


def test_garbage_is_not_a_request() -> None:
    assert parse_request(b"not a request") is None
    assert parse_request(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n") is None


def subject_request(*extra: x509.NameAttribute[str]) -> bytes:
    """A request for n1 whose subject carries `extra` after CN and O."""
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1"),
             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"), *extra]  # fmt: skip
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def test_an_extra_subject_attribute_is_named_by_its_short_name() -> None:
    req = parse_request(subject_request(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME,
                                                           "hackers")))  # fmt: skip
    assert req is not None
    assert req.other_subject == ("OU=hackers",)


# Every subject attribute `cryptography` names, with the name a denial shows: OpenSSL's short
# name, as `openssl req -noout -subject` prints it (OpenSSL 3.0); the dotted OID where OpenSSL
# has no name either.
SHORT_NAMES = {
    NameOID.COUNTRY_NAME: "C", NameOID.LOCALITY_NAME: "L", NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.STREET_ADDRESS: "street", NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID",
    NameOID.ORGANIZATION_IDENTIFIER: "organizationIdentifier",
    NameOID.SERIAL_NUMBER: "serialNumber", NameOID.SURNAME: "SN", NameOID.GIVEN_NAME: "GN",
    NameOID.TITLE: "title", NameOID.INITIALS: "initials",
    NameOID.GENERATION_QUALIFIER: "generationQualifier",
    NameOID.X500_UNIQUE_IDENTIFIER: "x500UniqueIdentifier",
    NameOID.DN_QUALIFIER: "dnQualifier", NameOID.PSEUDONYM: "pseudonym",
    NameOID.EMAIL_ADDRESS: "emailAddress",
    NameOID.JURISDICTION_COUNTRY_NAME: "jurisdictionC",
    NameOID.JURISDICTION_LOCALITY_NAME: "jurisdictionL",
    NameOID.JURISDICTION_STATE_OR_PROVINCE_NAME: "jurisdictionST",
    NameOID.BUSINESS_CATEGORY: "businessCategory", NameOID.POSTAL_ADDRESS: "postalAddress",
    NameOID.POSTAL_CODE: "postalCode", NameOID.INN: "INN", NameOID.OGRN: "OGRN",
    NameOID.SNILS: "SNILS", NameOID.UNSTRUCTURED_NAME: "unstructuredName",
    NameOID.UNSIGNED: "1.3.6.1.5.5.7.25.1",
}  # fmt: skip
VALUES = {NameOID.COUNTRY_NAME: "CH", NameOID.JURISDICTION_COUNTRY_NAME: "CH",
          NameOID.X500_UNIQUE_IDENTIFIER: "x", NameOID.DN_QUALIFIER: "x"}  # fmt: skip


def test_every_subject_attribute_cryptography_knows_has_its_short_name() -> None:
    known = {v for k, v in vars(NameOID).items() if not k.startswith("_")}
    known -= {NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME}  # read on their own
    assert known == set(SHORT_NAMES)
    attrs = [x509.NameAttribute(oid, VALUES.get(oid, "v")) for oid in SHORT_NAMES]
    req = parse_request(subject_request(*attrs))
    assert req is not None
    assert req.other_subject == tuple(f"{n}={VALUES.get(o, 'v')}" for o, n in SHORT_NAMES.items())


def test_an_attribute_without_a_short_name_keeps_its_dotted_oid() -> None:
    private = ObjectIdentifier("1.3.6.1.4.1.99999.1")
    req = parse_request(subject_request(x509.NameAttribute(private, "x")))
    assert req is not None
    assert req.other_subject == ("1.3.6.1.4.1.99999.1=x",)


# Requests Go's x509 reads but `cryptography` refuses, built by hand and validly signed: each
# is "not a valid PKCS#10 request" (denied), never an exception that fails every sync.
def _tlv(tag: int, value: bytes) -> bytes:
    n = len(value)
    size = bytes([n]) if n < 128 else bytes([0x80 | (n.bit_length() + 7) // 8]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")  # fmt: skip
    return bytes([tag]) + size + value


def _signed(extensions: list[x509.ExtensionType], swap: tuple[bytes, bytes] | None = None) -> bytes:
    """A request for n1 with `extensions`; `swap` rewrites its to-be-signed bytes (an OID made
    into another) before signing them again, which the builder would not allow."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes")]))  # fmt: skip
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    csr = builder.sign(key, hashes.SHA256())
    if swap is None:
        return csr.public_bytes(serialization.Encoding.DER)
    tbs = csr.tbs_certrequest_bytes.replace(*swap)
    ecdsa_sha256 = _tlv(0x30, _tlv(0x06, bytes.fromhex("2a8648ce3d040302")))
    signature = _tlv(0x03, b"\0" + key.sign(tbs, ec.ECDSA(hashes.SHA256())))
    return _tlv(0x30, tbs + ecdsa_sha256 + signature)


IP_NAME = _tlv(0x87, bytes([192, 0, 2, 10]))
SAN_OID = x509.oid.ExtensionOID.SUBJECT_ALTERNATIVE_NAME


def test_a_san_type_cryptography_cannot_read_is_not_a_request() -> None:
    x400 = _tlv(0xA3, _tlv(0x30, b""))
    edi_party = _tlv(0xA5, _tlv(0xA1, _tlv(0x0C, b"x")))
    for extra in (x400, edi_party):
        data = _signed([x509.UnrecognizedExtension(SAN_OID, _tlv(0x30, IP_NAME + extra))])
        assert parse_request(data) is None


def test_a_san_extension_given_twice_is_not_a_request() -> None:
    stand_in = ObjectIdentifier("2.5.29.99")  # written as a second SAN extension below
    data = _signed([x509.SubjectAlternativeName([x509.DNSName("n1")]),
                    x509.UnrecognizedExtension(stand_in, _tlv(0x30, IP_NAME))],
                   swap=(bytes.fromhex("0603551d63"), bytes.fromhex("0603551d11")))  # fmt: skip
    assert parse_request(data) is None
    one = _signed([x509.UnrecognizedExtension(SAN_OID, _tlv(0x30, IP_NAME))])
    parsed = parse_request(one)  # the hand-made encoding itself parses when the SAN is once
    assert parsed is not None
    assert parsed.ip_addresses == (ipaddress.ip_address("192.0.2.10"),)
