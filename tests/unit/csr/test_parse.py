"""Parsing requests made with `cryptography`: subject, SANs, key and self-signature."""

from __future__ import annotations

import ipaddress

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509 import load_pem_x509_csr

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
