"""A NodeBMC's spec checked (`core.spec.parse_spec`): every problem listed, nothing guessed;
and the credentials Secret read (`credentials_of`) without ever showing the password."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.spec import BmcSpec, InvalidSpec, credentials_of, parse_spec

ADDRESS = "redfish+https://10.0.0.5/redfish/v1/Systems/1"


def spec(**fields: Any) -> dict[str, Any]:
    return {"address": ADDRESS, "credentialsName": "node-a-bmc", **fields}


def test_a_valid_spec_verifies_certificates_unless_told_otherwise() -> None:
    parsed = parse_spec(spec())
    assert isinstance(parsed, BmcSpec)
    assert (str(parsed.address), parsed.credentials_name) == ("https://10.0.0.5/redfish/v1/Systems/1",
                                                              "node-a-bmc")  # fmt: skip
    assert (parsed.ca_pem, parsed.verify, parsed.endpoint) == (None, True, ("10.0.0.5", 443))


def test_only_an_explicit_true_turns_certificate_checks_off() -> None:
    off = parse_spec(spec(disableCertificateVerification=True))
    on = parse_spec(spec(disableCertificateVerification=False, caBundle="PEM"))
    assert isinstance(off, BmcSpec)
    assert isinstance(on, BmcSpec)
    assert (off.verify, on.verify, on.ca_pem) == (False, True, "PEM")
    bad = parse_spec(spec(disableCertificateVerification="true"))
    assert isinstance(bad, InvalidSpec)
    assert "true or false" in bad.message


def test_a_blank_ca_bundle_is_the_system_trust_store() -> None:
    parsed = parse_spec(spec(caBundle="  \n"))
    assert isinstance(parsed, BmcSpec)
    assert parsed.ca_pem is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"address": None}, "spec.address is required"),
        ({"address": 5}, "spec.address is required"),
        ({"address": "ipmi://10.0.0.5"}, "not a Redfish scheme"),
        ({"address": "10.0.0.5"}, "not a Redfish BMC address"),
        ({"address": "redfish://10.0.0.5/"}, "System path is required"),
        ({"address": "redfish://admin:pw@10.0.0.5/redfish/v1/Systems/1"}, "credentials do not"),
        ({"credentialsName": ""}, "spec.credentialsName is required"),
        ({"credentialsName": "Not_A_Name"}, "DNS-1123 subdomain"),
        ({"caBundle": 7}, "spec.caBundle must be PEM text"),
    ],
)
def test_an_invalid_spec_names_its_problem(fields: dict[str, Any], named: str) -> None:
    parsed = parse_spec(spec(**fields))
    assert isinstance(parsed, InvalidSpec)
    assert named in parsed.message


def test_every_problem_is_listed_at_once_and_a_password_in_the_address_is_hidden() -> None:
    parsed = parse_spec({"address": "redfish://admin:hunter2@10.0.0.5/x", "caBundle": 1})
    assert isinstance(parsed, InvalidSpec)
    assert len(parsed.problems) >= 3  # the address, the missing name, the CA bundle
    assert "hunter2" not in parsed.message


def data(**values: str) -> dict[str, Any]:
    return {"data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}


def test_the_secret_gives_username_and_password_as_they_are() -> None:
    found = credentials_of(data(username="admin", password="pw\n"), "ns/s")
    assert found == Credentials("admin", "pw\n")
    assert "pw" not in repr(found)


@pytest.mark.parametrize(
    ("secret", "named"),
    [
        ({}, "no username and no password"),
        (data(username="admin"), "no password"),
        (data(username="", password="x"), "no username"),
        ({"data": {"username": "not base64!", "password": "eA=="}}, "no username"),
        ({"data": {"username": base64.b64encode(b"\xff").decode(), "password": "eA=="}},
         "no username"),
    ],
)  # fmt: skip
def test_a_secret_without_usable_keys_says_which(secret: dict[str, Any], named: str) -> None:
    found = credentials_of(secret, "kube-system/node-a-bmc")
    assert isinstance(found, str)
    assert named in found
    assert "kube-system/node-a-bmc" in found
