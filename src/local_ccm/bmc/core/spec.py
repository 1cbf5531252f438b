"""A NodeBMC's `spec`, checked: where its System is, which Secret holds its credentials and
how to trust its certificate. Pure, no I/O.

Field names follow Metal3's BareMetalHost `spec.bmc` (`address`, `credentialsName`,
`disableCertificateVerification`) so an operator can copy them; `caBundle` is ours (Metal3
trusts what Ironic is configured with). The CRD's OpenAPI schema refuses wrong types and
missing fields at admission; this module checks what the schema cannot (the address's
grammar) and, since a schema can be changed or bypassed by an older CRD, the types again.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from local_ccm.bmc.core.address import Address, parse_address
from local_ccm.bmc.core.service import Credentials
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError, dns1123_subdomain


@dataclass(frozen=True)
class BmcSpec:
    address: Address
    credentials_name: str  # a Secret in the controller's credentials namespace
    ca_pem: str | None  # PEM text of the CAs to trust; None: the system's trust store
    verify: bool  # False only when the spec says disableCertificateVerification: true

    @property
    def endpoint(self) -> tuple[str, int]:
        """The BMC itself: several Systems (a chassis, the test emulator) may share one."""
        return self.address.host, self.address.port

    @property
    def connection(self) -> tuple[str, str | None, bool]:
        """What a client is made for: a change of any of these needs a new one."""
        return str(self.address), self.ca_pem, self.verify


@dataclass(frozen=True)
class InvalidSpec:
    problems: tuple[str, ...]

    @property
    def message(self) -> str:
        return "; ".join(self.problems)


def parse_spec(spec: Mapping[str, Any]) -> BmcSpec | InvalidSpec:
    """The spec, or every problem with it (nothing is contacted for an invalid spec)."""
    problems: list[str] = []
    address = _address(spec.get("address"), problems)
    name = spec.get("credentialsName")
    if not isinstance(name, str) or not name:
        problems.append("spec.credentialsName is required: the name of a Secret with keys "
                        "username and password")  # fmt: skip
    else:
        try:
            dns1123_subdomain(name)
        except ValidationError as exc:
            problems += [f"spec.credentialsName: {reason}" for reason in exc.args]
    ca = spec.get("caBundle")
    if ca is not None and not isinstance(ca, str):
        problems.append("spec.caBundle must be PEM text")
    skip = spec.get("disableCertificateVerification", False)
    if not isinstance(skip, bool):
        problems.append("spec.disableCertificateVerification must be true or false")
    if problems or address is None or not isinstance(name, str):
        return InvalidSpec(tuple(problems))
    return BmcSpec(address, name, ca if isinstance(ca, str) and ca.strip() else None,
                   verify=skip is not True)  # fmt: skip


def _address(value: Any, problems: list[str]) -> Address | None:
    if not isinstance(value, str) or not value.strip():
        problems.append("spec.address is required, e.g. redfish://10.0.0.5/redfish/v1/Systems/1")
        return None
    try:
        return parse_address(value)
    except ValidationError as exc:
        problems += [f"spec.address: {reason}" for reason in exc.args]
        return None


def credentials_of(secret: Mapping[str, Any], where: str) -> Credentials | str:
    """The `username` and `password` of a Secret (`data`, base64 as the API serves it), or
    what is wrong with it; `where` names it (namespace/name) for the message. The values are
    taken as they are: a trailing newline (`echo pw | base64`) is part of the password, as
    Metal3 reads it."""
    data = secret.get("data") or {}
    found: dict[str, str] = {}
    missing = []
    for key in ("username", "password"):
        value = data.get(key) if isinstance(data, Mapping) else None
        try:
            text = base64.b64decode(value, validate=True).decode() if value else ""
        except (ValueError, UnicodeDecodeError, TypeError):
            text = ""
        if text:
            found[key] = text
        else:
            missing.append(key)
    if missing:
        return f"Secret {where} has no {' and no '.join(missing)} (non-empty UTF-8)"
    return Credentials(found["username"], found["password"])
