"""Whether a kubelet serving CSR is approved, denied or left to wait: every check a small
function of plain data that names what it found wrong. Pure, no I/O.

The request-shape checks follow the API server's own `ValidateKubeletServingCSR`
(kubernetes pkg/apis/certificates/v1/helpers.go): organization exactly `system:nodes`, a DNS
or IP SAN, no email or URI SAN, usages exactly {digital signature, key encipherment, server
auth} or {digital signature, server auth}. The kubelet's certificate manager asks for the first
set with an RSA key and the second otherwise (pkg/kubelet/certificate/kubelet.go), so key
encipherment is accepted with RSA only. Then the operator's policy (`Policy`): every IP SAN in
one of the allowed prefixes, `spec.expirationSeconds` within the bound, as kubelet-csr-approver
checks them. On top of that the names and addresses must be the Node's own, which only the
writer of the Node's addresses can vouch for, and no other Node's: a node may write its own
status (NodeRestriction allows it), so an address it copied from another Node must not be
certified for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final, Literal, get_args

from local_ccm.csr.core.claims import Claims
from local_ccm.csr.core.model import (
    NODE_USER_PREFIX,
    NODES_GROUP,
    SIGNER,
    Csr,
    Node,
    Policy,
    Request,
    dns_key,
    mapped_ipv4,
)
from local_ccm.gosyntax import format_go_duration
from local_ccm.records import dataclass

Kind = Literal["approve", "deny", "wait", "skip"]
# Every reason a decision can carry, per kind: the metric exposes each at zero from the start,
# so that an alert on increase() sees the first denial of a process (a series that appears
# already at 1 has no increase).
DenyReason = Literal[
    "requester", "subject", "email_san", "uri_san", "no_san", "ip_san", "dns_san", "usages",
    "key", "signature", "ip_prefix", "expiration", "ip_san_shared", "dns_san_shared",
    "invalid_request",
]  # fmt: skip
WaitReason = Literal["node_missing", "node_uninitialized"]
REASONS: Final = {
    "approve": ("matches_node",),
    "deny": get_args(DenyReason),
    "wait": get_args(WaitReason),
}
SERVER_USAGES: Final = frozenset({"digital signature", "server auth"})
RSA_USAGES: Final = SERVER_USAGES | {"key encipherment"}
CURVES: Final = frozenset({"secp256r1", "secp384r1"})
MIN_RSA_BITS: Final = 2048
INVALID_REQUEST: Final = "not a valid PKCS#10 request"
DEFAULT_POLICY: Final = Policy()


@dataclass(frozen=True)
class Decision:
    """What to do with one CSR: `reason` is a short metric label, `message` names the check
    and the offending value."""

    kind: Kind
    reason: str
    message: str


def _deny(reason: DenyReason, message: str) -> Decision:
    return Decision("deny", reason, message)


Check = Callable[[Csr, Request], Decision | None]


def check_requester(csr: Csr, req: Request) -> Decision | None:
    if not csr.node_name or NODES_GROUP not in csr.groups:
        who = f"requester {csr.username!r} (groups {list(csr.groups)})"
        want = f"a node identity {NODE_USER_PREFIX}<name> in group {NODES_GROUP}"
        return _deny("requester", f"{who} is not {want}")
    return None


def check_subject(csr: Csr, req: Request) -> Decision | None:
    want_cn = (csr.username,)
    if req.common_names != want_cn or req.organizations != (NODES_GROUP,) or req.other_subject:
        got = [*(f"CN={c}" for c in req.common_names), *(f"O={o}" for o in req.organizations),
               *req.other_subject]  # fmt: skip
        return _deny("subject", f"subject {', '.join(got)!r} is not "
                     f"'CN={csr.username}, O={NODES_GROUP}'")  # fmt: skip
    return None


def check_sans(csr: Csr, req: Request) -> Decision | None:
    if req.emails:
        return _deny("email_san", f"email SAN {req.emails[0]!r} is not allowed")
    if req.uris:
        return _deny("uri_san", f"URI SAN {req.uris[0]!r} is not allowed")
    if not req.dns_names and not req.ip_addresses:
        return _deny("no_san", "a DNS or IP SAN is required")
    for ip in req.ip_addresses:
        if v4 := mapped_ipv4(ip):  # the kubelet never asks for one; the signer would write v4
            return _deny("ip_san", f"IP SAN {ip} is an IPv4-mapped IPv6 address (certified as "
                         f"{v4}): ask for {v4} itself")  # fmt: skip
    for name in req.dns_names:
        if "*" in name:  # the kubelet never asks for one; it would cover other Nodes' names
            return _deny("dns_san", f"DNS SAN {name!r} is a wildcard: not allowed")
    return None


def check_usages(csr: Csr, req: Request) -> Decision | None:
    usages = frozenset(csr.usages)
    allowed = (SERVER_USAGES, RSA_USAGES) if req.key_kind == "rsa" else (SERVER_USAGES,)
    if usages not in allowed or len(usages) != len(csr.usages):
        want = " or ".join(str(sorted(a)) for a in allowed)
        return _deny("usages", f"usages {list(csr.usages)} are not {want}")
    return None


def check_key(csr: Csr, req: Request) -> Decision | None:
    ok = {
        "rsa": req.key_size >= MIN_RSA_BITS,
        "ecdsa": req.curve in CURVES,
        "ed25519": True,
    }.get(req.key_kind, False)
    if not ok:
        what = req.curve or f"{req.key_size} bits"
        return _deny("key", f"{req.key_kind.upper()} key ({what}) is not RSA >= {MIN_RSA_BITS}, "
                     "ECDSA P-256/P-384 or Ed25519")  # fmt: skip
    return None


def check_signature(csr: Csr, req: Request) -> Decision | None:
    if not req.signature_valid:
        return _deny("signature", "the request's self-signature does not verify")
    return None


REQUEST_CHECKS: Final[Sequence[Check]] = (
    check_requester, check_subject, check_sans, check_usages, check_key, check_signature,
)  # fmt: skip


def check_ip_prefixes(csr: Csr, req: Request, policy: Policy) -> Decision | None:
    if not policy.ip_prefixes:
        return None
    for ip in req.ip_addresses:
        if not any(ip in prefix for prefix in policy.ip_prefixes):
            allowed = ", ".join(str(p) for p in policy.ip_prefixes)
            return _deny("ip_prefix", f"IP SAN {ip} is in none of --csr-ip-prefixes {allowed}")
    return None


def check_expiration(csr: Csr, req: Request, policy: Policy) -> Decision | None:
    asked, bound = csr.expiration_seconds, policy.max_expiration
    if asked is None or not bound or asked <= bound:
        return None  # without expirationSeconds the signer's own duration applies
    return _deny("expiration", f"spec.expirationSeconds {asked} ({format_go_duration(asked)}) "
                 f"is more than --csr-max-expiration {format_go_duration(bound)}")  # fmt: skip


POLICY_CHECKS: Final[Sequence[Callable[[Csr, Request, Policy], Decision | None]]] = (
    check_ip_prefixes, check_expiration,
)  # fmt: skip


def check_node(csr: Csr, node: Node | None) -> Decision | None:
    """Wait for a Node that is not there yet or not initialised (its addresses are not final)."""
    if node is None:
        return Decision("wait", "node_missing", f"Node {csr.node_name!r} does not exist (yet)")
    if not node.initialised:
        return Decision("wait", "node_uninitialized", f"Node {node.name!r} is not initialised")
    return None


def check_addresses(req: Request, node: Node) -> Decision | None:
    for ip in req.ip_addresses:
        if ip not in node.ips:
            return _deny("ip_san", f"IP SAN {ip} is not an InternalIP or ExternalIP of Node "
                         f"{node.name!r}")  # fmt: skip
    shown = {dns_key(n) for n in node.dns_names}
    for name in req.dns_names:
        if dns_key(name) not in shown:
            return _deny("dns_san", f"DNS SAN {name!r} is not a Hostname, InternalDNS or "
                         f"ExternalDNS of Node {node.name!r}")  # fmt: skip
    return None


def _nodes(names: Sequence[str]) -> str:
    return f"Node{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}"


def check_claims(req: Request, node: Node, claims: Claims) -> Decision | None:
    """Deny a SAN another Node also shows. When an address moved legitimately the old Node
    may still show it for a while: the denial says so, and the kubelet asks again."""
    shared: list[tuple[DenyReason, str, str, Sequence[str]]]
    shared = [("ip_san_shared", f"IP SAN {ip}", "an address", claims.others(ip, node.name))
              for ip in req.ip_addresses]  # fmt: skip
    shared += [("dns_san_shared", f"DNS SAN {name!r}", "a name",
                claims.others(name, node.name)) for name in req.dns_names]  # fmt: skip
    for reason, san, kind, others in shared:
        if others:
            who = _nodes(others)
            return _deny(reason, f"{san} is also {kind} of {who}: not approved while another "
                         "Node shows it (if it moved to this Node, the kubelet asks again and "
                         f"is approved once {who} no longer shows it)")  # fmt: skip
    return None


def decide(
    csr: Csr,
    req: Request | None,
    node: Node | None,
    policy: Policy = DEFAULT_POLICY,
    claims: Claims | None = None,
) -> Decision:
    """The decision for `csr` (`req` None: unparsable), given its requester's Node, the
    operator's `policy` and which Nodes show which addresses and names (`claims`)."""
    if csr.signer != SIGNER or csr.decided:
        return Decision("skip", "not_ours" if csr.signer != SIGNER else "decided", "")
    if req is None:
        return _deny("invalid_request", INVALID_REQUEST)
    found = _first(check(csr, req) for check in REQUEST_CHECKS)
    if found := found or _first(check(csr, req, policy) for check in POLICY_CHECKS):
        return found
    if waiting := check_node(csr, node):
        return waiting
    assert node is not None  # check_node waits otherwise
    if found := check_addresses(req, node) or check_claims(req, node, claims or Claims([node])):
        return found
    return Decision("approve", "matches_node", f"names and addresses match Node {node.name!r}")


def _first(found: Iterable[Decision | None]) -> Decision | None:
    """The first check that found something (the checks run lazily, in order)."""
    return next((d for d in found if d is not None), None)
