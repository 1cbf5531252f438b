"""kubelet-csr-approver's test table (postfinance/kubelet-csr-approver,
internal/controller/csr_controller_test.go), ported case by case to the pure decision.

Upstream runs each case on envtest with this configuration (testenv_setup_test.go): IP prefixes
`192.168.0.0/16,fc00::/7`, at most 367 days, up to 3 DNS names, names matching
`^[\\w-]*\\.test\\.ch$`, DNS answered by a mock resolver (`<node>.test.ch` resolves to the
node's addresses). Here the Node's status stands where upstream's resolver and regex stand:
the names and addresses a Node shows are the ones it may be certified for (docs/csr.md,
"Differences from kubelet-csr-approver"). Where a case's outcome differs, the test says so
and why. Upstream's requests ask for `key encipherment` with an Ed25519 key, which the
kubelet never does (it asks for it with RSA keys only) and this approver denies, so the ported
requests use the kubelet's usages for that key.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from local_ccm.csr.core.claims import Claims
from local_ccm.csr.core.decide import Decision, decide
from local_ccm.csr.core.model import Csr, Node, Policy, Request

V4, V6 = ipaddress.ip_address("192.168.14.34"), ipaddress.ip_address("fc00:1291:feed::cafe")
NAME = "abcd"  # upstream's random 4-character node name
POLICY = Policy(ip_prefixes=(ipaddress.ip_network("192.168.0.0/16"),
                             ipaddress.ip_network("fc00::/7")),
                max_expiration=367 * 24 * 3600)  # fmt: skip
CSR = Csr(name="csr-x", uid="u", signer="kubernetes.io/kubelet-serving",
          username=f"system:node:{NAME}", groups=("system:nodes", "system:authenticated"),
          usages=("digital signature", "server auth"))  # fmt: skip
REQ = Request(common_names=(f"system:node:{NAME}",), organizations=("system:nodes",),
              other_subject=(), dns_names=(f"{NAME}.test.ch",), ip_addresses=(V4, V6),
              emails=(), uris=(), key_kind="ed25519", key_size=256, curve="",
              signature_valid=True)  # fmt: skip
NODE = Node(name=NAME, uid="nu", initialised=True, ips=frozenset({V4, V6}),
            dns_names=frozenset({NAME, f"{NAME}.test.ch"}))  # fmt: skip


def run(csr: Csr = CSR, req: Request = REQ, node: Node = NODE) -> Decision:
    return decide(csr, req, node, POLICY, Claims([node]))


def test_valid_csr_approved() -> None:  # TestValidCsrApproved
    assert run().kind == "approve"


def test_wrong_signer_csr() -> None:  # TestWrongSignerCsr: neither approved nor denied
    assert run(replace(CSR, signer="example.com/not-kubelet-serving")).kind == "skip"


def test_non_matching_common_name_username() -> None:  # TestNonMatchingCommonNameUsername
    decision = run(req=replace(REQ, common_names=("funny-common-name",)))
    assert (decision.kind, decision.reason) == ("deny", "subject")


def test_regex_check_active_with_bypass() -> None:  # TestRegexCheckActiveWithBypass
    # Node "a" asks for a.test.ch and auth.evil.io: upstream's regex refuses the second name;
    # here it is refused because Node "a" does not show it.
    csr = replace(CSR, username="system:node:a")
    req = replace(REQ, common_names=("system:node:a",), ip_addresses=(),
                  dns_names=("a.test.ch", "auth.evil.io"))  # fmt: skip
    node = Node("a", "ua", True, frozenset(), frozenset({"a", "a.test.ch"}))
    decision = run(csr, req, node)
    assert (decision.kind, decision.reason) == ("deny", "dns_san")
    assert "auth.evil.io" in decision.message


def test_invalid_dns_name() -> None:  # TestInvalidDNSName: a name not prefixed by the node's
    decision = run(req=replace(REQ, ip_addresses=(), dns_names=("fishing.google.com",)))
    assert (decision.kind, decision.reason) == ("deny", "dns_san")


def test_invalid_regex_name() -> None:  # TestInvalidRegexName
    req = replace(REQ, ip_addresses=(), dns_names=(f"{NAME}.phishingTemptative.ch",))
    assert run(req=req).reason == "dns_san"


def test_invalid_regex_name_the_node_itself_shows_is_approved() -> None:
    # Difference (TestInvalidRegexName): there is no name regex; a name the Node's status shows
    # (written by the agent, or the kubelet) is the Node's, whatever its form.
    name = f"{NAME}.phishingTemptative.ch"
    node = replace(NODE, dns_names=NODE.dns_names | {name})
    assert run(req=replace(REQ, ip_addresses=(), dns_names=(name,)), node=node).kind == "approve"


def test_unresolved_dns_name() -> None:  # TestUnresolvedDNSName
    # Upstream denies a name that does not resolve; here nothing is resolved: the name is
    # denied because Node "unresolved" does not show it, approved once it does.
    csr = replace(CSR, username="system:node:unresolved")
    req = replace(REQ, common_names=("system:node:unresolved",), ip_addresses=(),
                  dns_names=("unresolved.test.ch",))  # fmt: skip
    node = Node("unresolved", "uu", True, frozenset(), frozenset({"unresolved"}))
    assert run(csr, req, node).reason == "dns_san"
    shown = replace(node, dns_names=frozenset({"unresolved", "unresolved.test.ch"}))
    assert run(csr, req, shown).kind == "approve"


def test_mismatched_resolved_ips_san_ips() -> None:  # TestMismatchedResolvedIpsSANIps
    # 9.9.9.9 is no address of the Node (upstream: not among the name's resolved addresses);
    # it is outside the prefixes too, and that check comes first here, as upstream's
    # allow-list check is independent of DNS.
    decision = run(req=replace(REQ, ip_addresses=(ipaddress.ip_address("9.9.9.9"),)))
    assert (decision.kind, decision.reason) == ("deny", "ip_prefix")
    anywhere = decide(CSR, replace(REQ, ip_addresses=(ipaddress.ip_address("9.9.9.9"),)),
                      NODE, Policy())  # fmt: skip
    assert anywhere.reason == "ip_san"


def test_expiration_seconds_too_large() -> None:  # TestExpirationSecondsTooLarge
    decision = run(replace(CSR, expiration_seconds=368 * 24 * 3600))
    assert (decision.kind, decision.reason) == ("deny", "expiration")


def test_san_checked_even_with_dns_resolution_bypassed() -> None:
    # TestSANCheckedEvenWithDNSResolutionBypassed: approved upstream because the name starts
    # with the node's name and matches the regex. Difference: a prefix is not enough here, the
    # Node must show the name; with it shown, approved.
    name = f"{NAME}-unresolved.test.ch"
    req = replace(REQ, ip_addresses=(), dns_names=(name,))
    assert run(req=req).reason == "dns_san"
    assert run(req=req, node=replace(NODE, dns_names=NODE.dns_names | {name})).kind == "approve"


def test_x509_cr_ip_addresses_with_dns_bypass() -> None:  # TestX509CRIPAddressesWithDNSBypass
    # 192.168.3.4 lies in the prefixes: approved upstream with DNS resolution bypassed, here
    # when the Node shows it (and denied when it does not).
    ip = ipaddress.ip_address("192.168.3.4")
    req = replace(REQ, ip_addresses=(ip,))
    assert run(req=req).reason == "ip_san"
    assert run(req=req, node=replace(NODE, ips=NODE.ips | {ip})).kind == "approve"


def test_bypass_dns_resolution() -> None:  # TestBypassDNSResolution: never resolved here
    name = f"{NAME}-unresolved.test.ch"
    node = replace(NODE, dns_names=NODE.dns_names | {name})
    assert run(req=replace(REQ, ip_addresses=(), dns_names=(name,)), node=node).kind == "approve"


def test_ipv4_not_whitelisted() -> None:  # TestIPv4NotWhitelisted: even if the Node shows it
    ip = ipaddress.ip_address("9.9.9.9")
    decision = run(req=replace(REQ, ip_addresses=(ip,)), node=replace(NODE, ips=frozenset({ip})))
    assert (decision.kind, decision.reason) == ("deny", "ip_prefix")


def test_ipv6_not_whitelisted() -> None:  # TestIPv6NotWhitelisted
    ip = ipaddress.ip_address("2001:c0fe:beef::14")
    decision = run(req=replace(REQ, ip_addresses=(ip,)), node=replace(NODE, ips=frozenset({ip})))
    assert (decision.kind, decision.reason) == ("deny", "ip_prefix")


def test_ipv6_without_dns_not_whitelisted() -> None:  # TestIPv6WithoutDNSNotWhitelisted
    ip = ipaddress.ip_address("2001:c0fe:beef::14")
    req = replace(REQ, ip_addresses=(ip,), dns_names=())
    decision = run(req=req, node=replace(NODE, ips=frozenset({ip})))
    assert (decision.kind, decision.reason) == ("deny", "ip_prefix")


def test_skip_deny_flag_is_the_loops_not_the_decisions() -> None:  # TestSkipDenyFlag
    # The decision is still a denial; `--csr-deny=false` (upstream `--skip-deny-step`) leaves
    # it pending in the loop: tests/unit/csr/test_run.py and C06 cover that.
    assert run(req=replace(REQ, dns_names=("fishing-test.google.com",))).kind == "deny"
