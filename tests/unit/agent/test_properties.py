"""Hypothesis properties of desired_addresses() and of candidate selection."""

from __future__ import annotations

from fnmatch import fnmatchcase
from ipaddress import ip_address, ip_interface
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local_ccm import names
from local_ccm.agent.core.addresses import (
    AddressPlan,
    AddressPolicy,
    NodeAddress,
    desired_addresses,
    encode_owned,
)
from local_ccm.agent.core.candidates import (
    DISABLED,
    Candidate,
    Detection,
    DetectorKey,
    Failed,
    Found,
    choose_address,
)
from local_ccm.agent.core.config import (
    ADDRESS_TYPES,
    DEFAULT_INTERFACE_EXCLUDE,
    EXTERNAL,
    FAMILIES,
    INTERNAL,
    AgentConfig,
    Family,
    IPAddress,
    TypeSettings,
)
from local_ccm.agent.core.writes import plan_status_patch
from local_ccm.ifnames import interface_matches

# Small pools, so that detections, provided IPs and existing entries collide often.
POOL = {
    4: [ip_address("192.0.2.1"), ip_address("198.51.100.7")],
    6: [ip_address("2001:db8::1"), ip_address("2001:db8::2")],
}
NON_IP = [NodeAddress("Hostname", "n1"), NodeAddress("InternalDNS", "n1.example.")]
GARBAGE = [NodeAddress("InternalIP", "not-an-ip"), NodeAddress("Custom", "x")]
# Passing runs take well under a second; the margin lets a failure shrink to a readable example.
pytestmark = pytest.mark.timeout(60)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ip_entries = st.builds(
    NodeAddress,
    st.sampled_from(ADDRESS_TYPES),
    st.sampled_from([*POOL[4], *POOL[6]]).map(str),
)
entries = st.one_of(ip_entries, st.sampled_from(NON_IP + GARBAGE))


def detection(family: Family) -> st.SearchStrategy[Detection]:
    return st.one_of(
        st.just(DISABLED),
        st.sampled_from([Failed("no_route"), Failed("no_eligible_address")]),
        st.sampled_from(POOL[family]).map(Found),
    )


detected_maps = st.fixed_dictionaries(
    {(kind, family): detection(family) for kind in ADDRESS_TYPES for family in FAMILIES}
)
policies = st.builds(
    AddressPolicy,
    st.sampled_from([(4, 6), (6, 4)]),
    st.sampled_from(["prefer", "strict", "ignore"]),
    st.booleans(),
)


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[
    list[NodeAddress],
    tuple[IPAddress, ...],
    dict[DetectorKey, Detection],
    tuple[NodeAddress, ...] | None,
    AddressPolicy,
]:
    current = draw(st.lists(entries, max_size=8))
    # Realistic provided IPs: the kubelet seeded them as InternalIPs, one per family.
    internal_ips = {e.ip for e in current if e.type == INTERNAL and e.ip is not None}
    provided: tuple[IPAddress, ...] = ()
    for family in FAMILIES:
        of_family = sorted(str(ip) for ip in internal_ips if ip.version == family)
        wanted: bool = draw(st.booleans())
        if of_family and wanted:
            provided += (ip_address(draw(st.sampled_from(of_family))),)
    owned = draw(st.none() | st.lists(ip_entries, max_size=4).map(tuple))
    if owned is not None:
        owned += tuple(draw(st.lists(st.sampled_from(current), max_size=4))) if current else ()
        owned = tuple(o for o in owned if o.ip is not None)
    return current, provided, draw(detected_maps), owned, draw(policies)


def _as_node(plan: AddressPlan, provided: tuple[IPAddress, ...]) -> dict[str, Any]:
    notes = {names.OWNED_ADDRESSES_ANNOTATION: plan.annotation}
    if provided:
        notes[names.PROVIDED_NODE_IP_ANNOTATION] = ",".join(map(str, provided))
    return {
        "metadata": {"name": "n1", "resourceVersion": "7", "annotations": notes},
        "status": {"addresses": [a.to_api() for a in plan.addresses]},
    }


@SETTINGS
@given(scenarios())
def test_desired_list_never_contains_duplicates(scenario: Any) -> None:
    plan = desired_addresses(*scenario)
    keys = [a.key for a in plan.addresses]
    assert len(keys) == len(set(keys))


@SETTINGS
@given(scenarios())
def test_never_drops_an_address_it_does_not_own(scenario: Any) -> None:
    current, provided, detected, owned, policy = scenario
    plan = desired_addresses(current, provided, detected, owned, policy)
    out = {a.key for a in plan.addresses}
    owned_keys = {o.key for o in owned or ()}
    consulted = provided if policy.provided != "ignore" else ()
    for e in current:
        ip = e.ip
        adoptable = ip is not None and detected[e.type, ip.version] != DISABLED
        mine = e.key in owned_keys if owned is not None else adoptable
        kubelets = e.type == "InternalIP" and ip in consulted  # --node-ip: InternalIP entries
        if ip is None or kubelets or not mine:
            assert e.key in out, e


@SETTINGS
@given(scenarios())
def test_applying_the_plan_then_recomputing_gives_no_write(scenario: Any) -> None:
    current, provided, detected, owned, policy = scenario
    first = desired_addresses(current, provided, detected, owned, policy)
    second = desired_addresses(first.addresses, provided, detected, first.owned, policy)
    assert (second.addresses, second.owned) == (first.addresses, first.owned)
    assert encode_owned(second.owned) == first.annotation
    node = _as_node(first, provided)
    assert plan_status_patch(node, second, condition=None, now="t") is None


@SETTINGS
@given(scenarios())
def test_dual_stack_node_never_loses_a_detected_family(scenario: Any) -> None:
    current, provided, detected, owned, policy = scenario
    plan = desired_addresses(current, provided, detected, owned, policy)
    mine = {o.key for o in plan.owned}
    for family in FAMILIES:
        d = detected[INTERNAL, family]
        had = any(
            e.type == INTERNAL and e.ip is not None and e.ip.version == family and e.key in mine
            for e in current
        )
        if isinstance(d, Found) or (isinstance(d, Failed) and had):
            assert any(
                a.type == INTERNAL and a.ip is not None and a.ip.version == family
                for a in plan.addresses
            ), (family, plan.addresses)


@SETTINGS
@given(scenarios())
def test_detected_external_is_written_unless_deduped(scenario: Any) -> None:
    # Also when it equals the kubelet's --node-ip: that is an InternalIP entry, not this one.
    current, provided, detected, owned, policy = scenario
    plan = desired_addresses(current, provided, detected, owned, policy)
    internal = {a.ip for a in plan.addresses if a.type == INTERNAL}
    for family in FAMILIES:
        d = detected[EXTERNAL, family]
        if isinstance(d, Found):
            written = NodeAddress(EXTERNAL, str(d.address)).key in {a.key for a in plan.addresses}
            deduped = policy.dedupe_external and d.address in internal
            assert written or deduped


@SETTINGS
@given(scenarios())
def test_order_is_internal_then_external_then_the_rest(scenario: Any) -> None:
    plan = desired_addresses(*scenario)
    rank = {"InternalIP": 0, "ExternalIP": 1, "Hostname": 2, "InternalDNS": 3}
    ranks = [rank.get(a.type, 5) for a in plan.addresses]
    assert ranks == sorted(ranks)


# ------------------------------------------------------------------ selection
candidates = st.builds(
    Candidate,
    st.sampled_from(["eth0", "eth1", "bond0", "cni0"]),
    st.integers(2, 6),
    st.sampled_from(["192.0.2.1/24", "192.0.2.9/32", "198.51.100.3/24", "198.51.100.4/24"]).map(
        ip_interface
    ),
    st.frozensets(st.sampled_from(["secondary", "permanent"])),
)


@SETTINGS
@given(st.lists(candidates, max_size=6, unique_by=lambda c: (c.ifindex, c.interface)), st.randoms())
def test_cidr_selection_is_independent_of_dump_order(cands: list[Candidate], rnd: Any) -> None:
    config = AgentConfig(
        internal=TypeSettings(include=(ip_interface("0.0.0.0/0").network,)),
        external=TypeSettings(),
    )
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    first = choose_address(INTERNAL, 4, config, None, cands)
    assert choose_address(INTERNAL, 4, config, None, shuffled) == first


_GLOB_TEXT = st.text(alphabet="ab-_*?[]!0", max_size=6)


@given(name=st.text(alphabet="ab-_*?[]!0", max_size=6), pattern=_GLOB_TEXT)
def test_interface_matches_is_fnmatchcase(name: str, pattern: str) -> None:
    """The fast paths (plain names, `prefix*`) answer exactly as fnmatch would."""
    assert interface_matches(name, pattern) == fnmatchcase(name, pattern)


@pytest.mark.parametrize("pattern", DEFAULT_INTERFACE_EXCLUDE)
def test_interface_matches_agrees_with_fnmatchcase_on_the_default_exclusions(pattern: str) -> None:
    for name in ("lo", "lo0", "eth0", "cilium_host", "cilium", "veth1a2b", "kube-bridge",
                 "kube-bridge0", "weave", "weave1", "ovn-k8s-mp0", "wg0", "zt7"):  # fmt: skip
        assert interface_matches(name, pattern) == fnmatchcase(name, pattern), name
