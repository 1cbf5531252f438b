"""The approver's decisions on plain data: every check, and the order they are taken in."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

import pytest

from local_ccm.csr.core.claims import Claims
from local_ccm.csr.core.decide import INVALID_REQUEST, Decision, decide
from local_ccm.csr.core.model import Csr, Node, Policy, Request, project_csr, project_node

IP = ipaddress.ip_address("192.0.2.10")
CSR = Csr(name="csr-1", uid="u1", signer="kubernetes.io/kubelet-serving",
          username="system:node:n1", groups=("system:nodes", "system:authenticated"),
          usages=("digital signature", "server auth"), decided=False, request=b"")  # fmt: skip
REQ = Request(common_names=("system:node:n1",), organizations=("system:nodes",),
              other_subject=(), dns_names=("n1",), ip_addresses=(IP,), emails=(), uris=(),
              key_kind="ecdsa", key_size=256, curve="secp256r1", signature_valid=True)  # fmt: skip
NODE = Node(name="n1", uid="nu", initialised=True, ips=frozenset({IP}),
            dns_names=frozenset({"n1"}))  # fmt: skip


def kind_reason(decision: Decision) -> tuple[str, str]:
    return decision.kind, decision.reason


def test_a_request_matching_its_initialised_node_is_approved() -> None:
    assert kind_reason(decide(CSR, REQ, NODE)) == ("approve", "matches_node")


def test_an_rsa_request_with_key_encipherment_is_approved() -> None:
    csr = replace(CSR, usages=("digital signature", "key encipherment", "server auth"))
    req = replace(REQ, key_kind="rsa", key_size=2048, curve="")
    assert decide(csr, req, NODE).kind == "approve"


def test_an_already_decided_csr_or_another_signer_is_skipped() -> None:
    assert kind_reason(decide(replace(CSR, decided=True), REQ, NODE)) == ("skip", "decided")
    other = replace(CSR, signer="kubernetes.io/kube-apiserver-client")
    assert kind_reason(decide(other, REQ, NODE)) == ("skip", "not_ours")


def test_an_unparsable_request_is_denied_as_not_pkcs10() -> None:
    assert decide(CSR, None, NODE) == Decision("deny", "invalid_request", INVALID_REQUEST)


@pytest.mark.parametrize(
    ("csr", "req", "reason", "named"),
    [
        (replace(CSR, username="alice"), REQ, "requester", "'alice'"),
        (replace(CSR, groups=("system:authenticated",)), REQ, "requester", "system:nodes"),
        (CSR, replace(REQ, common_names=("system:node:n2",)), "subject", "system:node:n2"),
        (CSR, replace(REQ, organizations=("system:masters",)), "subject", "O=system:masters"),
        (CSR, replace(REQ, other_subject=("OU=hackers",)), "subject", "OU=hackers"),
        (CSR, replace(REQ, emails=("a@example.com",)), "email_san", "a@example.com"),
        (CSR, replace(REQ, uris=("spiffe://x",)), "uri_san", "spiffe://x"),
        (CSR, replace(REQ, dns_names=(), ip_addresses=()), "no_san", "DNS or IP SAN"),
        (replace(CSR, usages=("digital signature", "client auth")), REQ, "usages", "client auth"),
        (replace(CSR, usages=("digital signature", "key encipherment", "server auth")), REQ,
         "usages", "key encipherment"),
        (CSR, replace(REQ, key_kind="rsa", key_size=1024, curve=""), "key", "1024 bits"),
        (CSR, replace(REQ, curve="secp521r1", key_size=521), "key", "secp521r1"),
        (CSR, replace(REQ, key_kind="other", key_size=0, curve=""), "key", "OTHER"),
        (CSR, replace(REQ, signature_valid=False), "signature", "self-signature"),
    ],
)  # fmt: skip
def test_a_request_failing_a_check_is_denied_naming_the_check_and_value(
    csr: Csr, req: Request, reason: str, named: str
) -> None:
    decision = decide(csr, req, NODE)
    assert kind_reason(decision) == ("deny", reason)
    assert named in decision.message


def test_a_foreign_ip_san_is_denied_naming_the_address() -> None:
    req = replace(REQ, ip_addresses=(IP, ipaddress.ip_address("203.0.113.9")))
    decision = decide(CSR, req, NODE)
    assert kind_reason(decision) == ("deny", "ip_san")
    assert "203.0.113.9" in decision.message


def test_a_foreign_dns_san_is_denied_naming_the_name() -> None:
    decision = decide(CSR, replace(REQ, dns_names=("n1", "evil.example")), NODE)
    assert kind_reason(decision) == ("deny", "dns_san")
    assert "evil.example" in decision.message


def test_a_missing_or_uninitialised_node_waits() -> None:
    assert kind_reason(decide(CSR, REQ, None)) == ("wait", "node_missing")
    waiting = decide(CSR, REQ, replace(NODE, initialised=False))
    assert kind_reason(waiting) == ("wait", "node_uninitialized")


def test_request_checks_come_before_waiting_for_the_node() -> None:
    bad = replace(REQ, emails=("a@example.com",))
    assert decide(CSR, bad, replace(NODE, initialised=False)).kind == "deny"


def test_project_node_reads_taint_addresses_and_names() -> None:
    obj = {
        "metadata": {"name": "n1", "uid": "nu"},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized"}]},
        "status": {"addresses": [
            {"type": "InternalIP", "address": "192.0.2.10"},
            {"type": "ExternalIP", "address": "2001:db8::1"},
            {"type": "Hostname", "address": "n1"},
            {"type": "InternalDNS", "address": "n1.internal"},
            {"type": "Other", "address": "192.0.2.99"},
        ]},
    }  # fmt: skip
    node = project_node(obj)
    assert not node.initialised
    assert node.ips == {IP, ipaddress.ip_address("2001:db8::1")}
    assert node.dns_names == {"n1", "n1.internal"}


def test_project_csr_reads_spec_and_whether_a_decision_exists() -> None:
    obj = {
        "metadata": {"name": "c", "uid": "u"},
        "spec": {"signerName": "kubernetes.io/kubelet-serving", "username": "system:node:n1",
                 "groups": ["system:nodes"], "usages": ["server auth"], "request": "aGk="},
        "status": {"conditions": [{"type": "Denied", "status": "True"}]},
    }  # fmt: skip
    csr = project_csr(obj)
    assert (csr.node_name, csr.request, csr.decided) == ("n1", b"hi", True)
    assert not project_csr({"spec": {"username": "bob"}}).decided
    assert project_csr({"spec": {"username": "bob"}}).node_name == ""
    assert csr.expiration_seconds is None
    asked = project_csr({"spec": {"expirationSeconds": 3600}})
    assert asked.expiration_seconds == 3600


# ------------------------------------------------------------------ another Node's SANs

OTHER_IP = ipaddress.ip_address("192.0.2.20")


def claims_of(*nodes: Node) -> Claims:
    return Claims([NODE, *nodes])


def test_an_ip_san_another_node_also_shows_is_denied_naming_that_node() -> None:
    thief = replace(NODE, ips=frozenset({IP, OTHER_IP}))  # n1 added n2's address to its status
    owner = Node("n2", "u2", True, frozenset({OTHER_IP}), frozenset({"n2"}))
    req = replace(REQ, ip_addresses=(IP, OTHER_IP))
    decision = decide(CSR, req, thief, claims=Claims([thief, owner]))
    assert kind_reason(decision) == ("deny", "ip_san_shared")
    assert "IP SAN 192.0.2.20 is also an address of Node 'n2'" in decision.message
    assert "asks again" in decision.message  # what happens after a legitimate move


def test_a_dns_san_another_node_also_shows_is_denied_naming_that_node() -> None:
    thief = replace(NODE, dns_names=frozenset({"n1", "n2"}))
    owner = Node("n2", "u2", True, frozenset({OTHER_IP}), frozenset({"n2"}))
    decision = decide(CSR, replace(REQ, dns_names=("n1", "n2")), thief,
                      claims=Claims([thief, owner]))  # fmt: skip
    assert kind_reason(decision) == ("deny", "dns_san_shared")
    assert "DNS SAN 'n2' is also a name of Node 'n2'" in decision.message


def test_sans_no_other_node_shows_are_approved() -> None:
    owner = Node("n2", "u2", True, frozenset({OTHER_IP}), frozenset({"n2"}))
    assert decide(CSR, REQ, NODE, claims=claims_of(owner)).kind == "approve"


def test_every_other_node_showing_the_address_is_named() -> None:
    twins = [Node(n, n, True, frozenset({IP}), frozenset()) for n in ("n3", "n2")]
    decision = decide(CSR, REQ, NODE, claims=claims_of(*twins))
    assert "Nodes 'n2', 'n3'" in decision.message


def test_a_foreign_address_is_reported_as_not_the_nodes_before_as_shared() -> None:
    owner = Node("n2", "u2", True, frozenset({OTHER_IP}), frozenset({"n2"}))
    req = replace(REQ, ip_addresses=(OTHER_IP,))
    assert decide(CSR, req, NODE, claims=claims_of(owner)).reason == "ip_san"


# ------------------------------------------------------------------ IP prefix allow-list

PREFIXES = Policy(ip_prefixes=(ipaddress.ip_network("192.0.2.0/25"),
                               ipaddress.ip_network("2001:db8::/64")))  # fmt: skip


def test_with_prefixes_every_ip_san_must_lie_in_one() -> None:
    outside = ipaddress.ip_address("192.0.2.200")
    node = replace(NODE, ips=frozenset({IP, outside}))
    decision = decide(CSR, replace(REQ, ip_addresses=(IP, outside)), node, PREFIXES)
    assert kind_reason(decision) == ("deny", "ip_prefix")
    assert "IP SAN 192.0.2.200 is in none of --csr-ip-prefixes" in decision.message
    assert "192.0.2.0/25, 2001:db8::/64" in decision.message


def test_with_prefixes_sans_inside_them_are_approved_in_both_families() -> None:
    v6 = ipaddress.ip_address("2001:db8::10")
    node = replace(NODE, ips=frozenset({IP, v6}))
    assert decide(CSR, replace(REQ, ip_addresses=(IP, v6)), node, PREFIXES).kind == "approve"


def test_without_prefixes_any_address_of_the_node_is_approved() -> None:
    far = ipaddress.ip_address("203.0.113.9")
    node = replace(NODE, ips=frozenset({far}))
    assert decide(CSR, replace(REQ, ip_addresses=(far,)), node, Policy()).kind == "approve"


# ------------------------------------------------------------------ spec.expirationSeconds

DAY = 86400


def test_the_default_bound_is_367_days_as_kubelet_csr_approvers() -> None:
    assert Policy().max_expiration == 367 * DAY
    assert decide(replace(CSR, expiration_seconds=367 * DAY), REQ, NODE).kind == "approve"
    decision = decide(replace(CSR, expiration_seconds=368 * DAY), REQ, NODE)
    assert kind_reason(decision) == ("deny", "expiration")
    assert "spec.expirationSeconds 31795200 (8832h0m0s)" in decision.message
    assert "--csr-max-expiration 8808h0m0s" in decision.message


def test_a_csr_without_expiration_seconds_leaves_the_duration_to_the_signer() -> None:
    assert decide(CSR, REQ, NODE, Policy(max_expiration=600)).kind == "approve"


def test_a_zero_bound_means_no_bound() -> None:
    long = replace(CSR, expiration_seconds=10 * 365 * DAY)
    assert decide(long, REQ, NODE, Policy(max_expiration=0)).kind == "approve"


def test_policy_checks_deny_before_waiting_for_the_node() -> None:
    tainted = replace(NODE, initialised=False)
    long = replace(CSR, expiration_seconds=400 * DAY)
    assert decide(long, REQ, tainted).reason == "expiration"
    outside = Policy(ip_prefixes=(ipaddress.ip_network("198.51.100.0/24"),))
    assert decide(CSR, REQ, None, outside).reason == "ip_prefix"


# ---------------------------------------------------------------- SANs as TLS compares them
MAPPED = ipaddress.ip_address("::ffff:192.0.2.20")  # OTHER_IP, IPv4-mapped


def test_an_ipv4_mapped_ip_san_is_denied_naming_the_ipv4_address() -> None:
    """The signer writes it as 192.0.2.20 (Go's x509 writes 4 bytes) and clients compare it
    as that: it would certify another Node's IPv4 address past the shared-address check."""
    node = replace(NODE, ips=frozenset({IP, MAPPED}))
    decision = decide(CSR, replace(REQ, ip_addresses=(IP, MAPPED)), node)
    assert kind_reason(decision) == ("deny", "ip_san")
    assert "IPv4-mapped" in decision.message
    assert "certified as 192.0.2.20" in decision.message


def test_a_node_showing_a_mapped_address_shows_its_ipv4_address() -> None:
    thief = project_node({"metadata": {"name": "n1"}, "status": {"addresses": [
        {"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": str(IP)},
        {"type": "InternalIP", "address": str(MAPPED)}]}})  # fmt: skip
    assert OTHER_IP in thief.ips
    owner = Node("n2", "u2", True, frozenset({OTHER_IP}), frozenset({"n2"}))
    decision = decide(CSR, replace(REQ, ip_addresses=(IP, OTHER_IP)), thief,
                      claims=Claims([thief, owner]))  # fmt: skip
    assert kind_reason(decision) == ("deny", "ip_san_shared")


@pytest.mark.parametrize("asked", ["N2.Example", "n2.example.", "N2.EXAMPLE."])
def test_another_nodes_name_in_other_case_or_with_a_dot_is_shared(asked: str) -> None:
    """TLS compares names case-insensitively and without the trailing dot."""
    thief = project_node({"metadata": {"name": "n1"}, "status": {"addresses": [
        {"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": str(IP)},
        {"type": "InternalDNS", "address": asked}]}})  # fmt: skip
    owner = Node("n2", "u2", True, frozenset({OTHER_IP}), frozenset({"n2.example"}))
    decision = decide(CSR, replace(REQ, dns_names=("n1", asked)), thief,
                      claims=Claims([thief, owner]))  # fmt: skip
    assert kind_reason(decision) == ("deny", "dns_san_shared")


def test_the_nodes_own_name_in_other_case_is_its_own() -> None:
    node = replace(NODE, dns_names=frozenset({"n1", "N1.Example"}))
    assert decide(CSR, replace(REQ, dns_names=("n1.example.",)), node).kind == "approve"


def test_a_wildcard_dns_san_is_denied_even_when_the_node_shows_it() -> None:
    node = replace(NODE, dns_names=frozenset({"n1", "*.example"}))
    decision = decide(CSR, replace(REQ, dns_names=("*.example",)), node)
    assert kind_reason(decision) == ("deny", "dns_san")
    assert "wildcard" in decision.message


def test_a_request_that_is_not_a_string_is_no_request() -> None:
    assert project_csr({"spec": {"request": 12}}).request == b""
