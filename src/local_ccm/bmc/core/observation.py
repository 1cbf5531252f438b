"""What one poll of a BMC learned: the power state it read, or why it read none. Pure, no I/O.

The power state in a NodeBMC's status is the last poll's answer, never an older one: a poll
that got no answer (an unreachable BMC, a refused password, an invalid spec) records
`Unknown`, so `Off` in the status always means the BMC said Off on the last poll. `Absent` is
an answer too: the BMC answered 404 for the System's own path, where a System was read before at
the same spec. A 404 for a path never read is `Unknown`: a mistyped System id must not read as
a machine that is gone (the lifecycle controller deletes a NotReady Node whose System is
Absent). A System whose UUID is not the Node's `systemUUID` is another machine: its power state
says nothing about this Node, so it is `Unknown` with reason `SystemMismatch` (the lifecycle
controller would otherwise fence or taint out-of-service on another machine's Off, or power off
another machine that is On).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final, Literal, get_args

from local_ccm.bmc.core.errors import BmcError, ErrorKind
from local_ccm.bmc.core.system import System
from local_ccm.records import dataclass

PowerStatus = Literal["On", "Off", "PoweringOn", "PoweringOff", "Paused", "Unknown", "Absent"]
POWER_STATUSES: Final[tuple[PowerStatus, ...]] = get_args(PowerStatus)
Reason = Literal[
    "Contacted",
    "Unreachable",
    "Timeout",
    "TLSError",
    "AuthFailed",
    "InvalidResponse",
    "SystemNotFound",
    "SystemMismatch",
    "ServerError",
    "Rejected",
    "InvalidSpec",
    "CredentialsMissing",
]
REASONS: Final[tuple[Reason, ...]] = get_args(Reason)
FAILURES: Final[tuple[Reason, ...]] = REASONS[1:]  # the Reachable condition's False reasons
REASON_OF_KIND: Final[dict[ErrorKind, Reason]] = {
    "unreachable": "Unreachable",
    "timeout": "Timeout",
    "tls": "TLSError",
    "auth": "AuthFailed",
    "invalid-response": "InvalidResponse",
    "not-found": "SystemNotFound",
    "server-error": "ServerError",
    "rejected": "Rejected",
}
# What to do about each failure, appended to the message the status and the Event show.
HINTS: Final[dict[Reason, str]] = {
    "Unreachable": "check spec.address and that the controller's network reaches the BMC",
    "Timeout": "the BMC accepted the connection but did not answer in time (overloaded or hung)",
    "TLSError": "set spec.caBundle to the CA that signed the BMC's certificate, or "
    "spec.disableCertificateVerification: true to trust any certificate",
    "AuthFailed": "check username and password in the credentials Secret; it is read again "
    "at the next poll",
    "InvalidResponse": "spec.address may not name a Redfish System",
    "SystemNotFound": "the BMC has no System at this path: check the System id in "
    "spec.address, or the machine was removed",
    "SystemMismatch": "spec.address names another machine's System: fix the System id or the "
    "host in spec.address (or delete the NodeBMC); nothing is done to the Node or the System "
    "until they match",
    "ServerError": "the BMC reported an error of its own; polls back off",
    "Rejected": "the BMC refused the request",
    "InvalidSpec": "fix the NodeBMC's spec; nothing is contacted until then",
    "CredentialsMissing": "create the Secret with keys username and password in the "
    "controller's credentials namespace",
}


@dataclass(frozen=True)
class Observation:
    """One poll's outcome, `at` the wall time it was made."""

    power: PowerStatus
    reason: Reason
    message: str
    at: datetime
    retry_after: float | None = None  # the seconds a 429 or 5xx asked to wait, when it said
    not_found: int = 0  # 404s for a System read before, in a row up to this poll

    @property
    def reachable(self) -> bool:
        """The Reachable condition: the System was read."""
        return self.reason == "Contacted"

    @property
    def answered(self) -> bool:
        """The BMC gave an answer that says something about the machine: the System read,
        or the System gone (404). Only these move `lastContact` and change the Node."""
        return self.reason in ("Contacted", "SystemNotFound")


def observed(system: System, at: datetime, node_uuid: str = "") -> Observation:
    """The System read; `SystemMismatch` when it is not the machine of the Node's `node_uuid`
    (its `status.nodeInfo.systemUUID`; "" when there is no Node or it reports none)."""
    if is_other_machine(node_uuid, system.uuid):
        return Observation("Unknown", "SystemMismatch", f"GET {system.path}: the System's UUID "
                           f"{system.uuid} is not the Node's systemUUID {node_uuid}: "
                           f"{HINTS['SystemMismatch']}", at)  # fmt: skip
    power: PowerStatus = "Unknown" if system.power_state == "unknown" else system.power_state
    said = system.reported_power_state
    shown = power if said is None else f"{power} (the BMC said {said!r})"
    return Observation(power, "Contacted", f"GET {system.path}: PowerState {shown}", at)


# A System read before is Absent once the BMC has answered 404 for it on this many polls in a
# row: one 404 can be a BMC still starting its Redfish service or one that glitched, and Absent
# lets the lifecycle controller delete the NotReady Node and count the machine as off for the
# out-of-service taint.
ABSENT_AFTER: Final = 3

NEVER_READ: Final = (
    "no System was ever read at this address, so it counts as Unknown, not Absent: check the "
    "System id in spec.address"
)


PADDED: Final = (
    "; the username or the password in the Secret begins or ends with whitespace, which is sent "
    "as it is: a newline from `echo pw | base64`? (use `echo -n`, or kubectl create secret "
    "--from-literal)"
)


def failed(
    error: BmcError, at: datetime, *, read_before: bool, padded: bool = False,
    not_found: int = ABSENT_AFTER,
) -> Observation:  # fmt: skip
    """The poll's failure. A 404 is `Absent` only when `read_before` (a System was read at
    this spec): the System went away; and only once `not_found` (the 404s in a row, this one
    included) reaches `ABSENT_AFTER`, before which it is `Unknown`. Without `read_before` the
    address may never have named a System. `padded`: the credentials sent begin or end with
    whitespace (said when they were refused)."""
    reason = REASON_OF_KIND[error.kind]
    if reason != "SystemNotFound":
        hint = HINTS[reason] + (PADDED if padded and reason == "AuthFailed" else "")
        return Observation("Unknown", reason, f"{error.message}: {hint}", at,
                           retry_after=error.retry_after)  # fmt: skip
    if not read_before:
        return Observation("Unknown", reason, f"{error.message}: {NEVER_READ}", at)
    if not_found < ABSENT_AFTER:
        return Observation("Unknown", reason, f"{error.message}: {not_found} of the "
                           f"{ABSENT_AFTER} answers in a row that make it Absent (a BMC "
                           f"starting or glitching can answer 404 once): {HINTS[reason]}", at,
                           not_found=not_found)  # fmt: skip
    return Observation("Absent", reason, f"{error.message}: {HINTS[reason]}", at,
                       not_found=not_found)  # fmt: skip


def invalid_spec(problems: str, at: datetime) -> Observation:
    return Observation("Unknown", "InvalidSpec", f"{problems}: {HINTS['InvalidSpec']}", at)


def credentials_missing(problem: str, at: datetime) -> Observation:
    return Observation("Unknown", "CredentialsMissing",
                       f"{problem}: {HINTS['CredentialsMissing']}", at)  # fmt: skip


def failure_delay(observation: Observation, first: float, longest: float) -> float:
    """The earliest next poll after a failed one: the backoff's first step, or the BMC's
    Retry-After when it asked for longer (RFC 9110 10.2.3: a busy or restarting BMC says when
    to come back), never past the backoff's longest step (a Retry-After of a day would leave
    the Node unwatched)."""
    return min(longest, max(first, observation.retry_after or 0.0))


def is_other_machine(node_uuid: str, system_uuid: str | None) -> bool:
    """Both UUIDs known and not the same machine's. The kubelet reports SMBIOS's UUID
    (/sys/class/dmi/id/product_uuid) and Redfish the same one, in any case; firmware that
    predates SMBIOS 2.6 stores its first three fields in the other byte order, so either
    reading of them matches. Anything unreadable is no evidence: not another machine; nor is
    a placeholder that firmware writes on many machines alike (all zeros, all ones, the
    white-box boards' 03000200-0400-0500-0006-000700080009)."""
    try:
        node, system = uuid.UUID(node_uuid), uuid.UUID(system_uuid or "")
    except ValueError:
        return False
    if node in _PLACEHOLDER_UUIDS or system in _PLACEHOLDER_UUIDS:
        return False
    return system not in (node, uuid.UUID(bytes_le=node.bytes))


_PLACEHOLDER_UUIDS: Final = frozenset(
    uuid.UUID(u)
    for u in (
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "03000200-0400-0500-0006-000700080009",
    )
)
