"""Which Nodes may announce an address and the order they try in."""

from __future__ import annotations

import collections
import hashlib
import ipaddress
from typing import Any

import pytest

from local_ccm.announce.core import choice
from local_ccm.announce.core.choice import NodeView, Traffic

ADDRESSES = [ipaddress.ip_address("192.0.2.0") + i for i in range(3000)]
NODES = [f"node-{i}" for i in range(10)]
ALL = frozenset(NODES)


def test_the_order_is_the_sha256_of_address_slash_node_highest_first() -> None:
    address = ipaddress.ip_address("192.0.2.10")
    order = choice.rank(address, ["a", "b", "c"])
    digests = [hashlib.sha256(f"192.0.2.10/{n}".encode()).hexdigest() for n in order]
    assert digests == sorted(digests, reverse=True)
    assert order == choice.rank(address, ["c", "a", "b", "a"])  # input order and repeats


def test_ipv6_is_hashed_in_its_canonical_text() -> None:
    address = ipaddress.ip_address("2001:DB8:0:0::1")
    assert choice.weight(address, "a") == hashlib.sha256(b"2001:db8::1/a").digest()


def test_addresses_spread_evenly() -> None:
    wins = collections.Counter(choice.rank(a, NODES)[0] for a in ADDRESSES)
    assert set(wins) == ALL
    assert all(240 <= count <= 360 for count in wins.values()), wins  # 300 expected each


def test_a_node_leaving_moves_only_the_addresses_it_won() -> None:
    before = {a: choice.rank(a, NODES)[0] for a in ADDRESSES}
    after = {a: choice.rank(a, [n for n in NODES if n != "node-3"])[0] for a in ADDRESSES}
    moved = {a for a in ADDRESSES if before[a] != after[a]}
    assert moved == {a for a in ADDRESSES if before[a] == "node-3"}
    # ... and each goes to the Node that ranked second for it.
    assert all(after[a] == choice.rank(a, NODES)[1] for a in moved)


def test_a_node_joining_takes_only_addresses_it_now_wins() -> None:
    before = {a: choice.rank(a, NODES)[0] for a in ADDRESSES}
    after = {a: choice.rank(a, [*NODES, "node-new"])[0] for a in ADDRESSES}
    assert {after[a] for a in ADDRESSES if before[a] != after[a]} == {"node-new"}


def test_place_leaves_the_holder_out_of_the_others_order() -> None:
    address = ADDRESSES[0]
    first, second, third = choice.rank(address, ["a", "b", "c"])
    eligible = frozenset({"a", "b", "c"})
    assert choice.place(address, eligible, second) == 1
    assert choice.place(address, eligible, second, holder=first) == 0
    assert choice.place(address, eligible, third, holder=first) == 1
    assert choice.place(address, eligible, first, holder=first) == 0
    assert choice.place(address, eligible, "d") is None
    assert choice.place(address, eligible, second, holder="gone") == 1


def node(name: str = "n1", ready: str = "True", labels: dict[str, str] | None = None
         ) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                  {"type": "Ready", "status": ready}]},
    }  # fmt: skip


def test_a_node_is_projected_from_its_ready_condition_and_exclusion_label() -> None:
    assert choice.project_node(node()) == NodeView("n1", ready=True, excluded=False)
    assert not choice.project_node(node(ready="Unknown")).ready
    assert not choice.project_node({"metadata": {"name": "x"}}).ready
    labelled = node(labels={choice.EXCLUDE_LABEL: ""})
    assert choice.project_node(labelled).excluded  # any value, as the service controller


def test_a_node_whose_network_is_unavailable_may_not_announce() -> None:
    """MetalLB's e2e "should not be announced from a node with a NetworkUnavailable
    condition": Ready, but its pod network is not set up."""
    raw = node()
    raw["status"]["conditions"].append({"type": "NetworkUnavailable", "status": "True"})
    view = choice.project_node(raw)
    assert view.network_unavailable
    assert choice.ineligible_reason(view, None, {"n1"}, Traffic()) == "NetworkUnavailable"
    raw["status"]["conditions"][-1]["status"] = "False"
    assert choice.ineligible_reason(choice.project_node(raw), None, {"n1"}, Traffic()) == ""


def test_ready_endpoints_name_their_nodes() -> None:
    slices: list[dict[str, Any]] = [
        {"endpoints": [
            {"nodeName": "a", "conditions": {"ready": True}},
            {"nodeName": "b", "conditions": {}},  # unknown counts as ready
            {"nodeName": "c", "conditions": {"ready": False, "terminating": True}},
            {"conditions": {"ready": True}},  # no Node
        ]},
        {"endpoints": None},
        {},
    ]  # fmt: skip
    assert choice.endpoint_nodes(slices) == {"a", "b"}


READY = NodeView("a", ready=True, excluded=False)


@pytest.mark.parametrize(
    ("view", "selected", "announcing", "traffic", "reason"),
    [
        (READY, None, {"a"}, Traffic(), ""),
        (READY, {"a"}, {"a"}, Traffic(local=True, endpoint_nodes=frozenset({"a"})), ""),
        (NodeView("a", False, False), None, {"a"}, Traffic(), "not Ready"),
        (NodeView("a", True, True), None, {"a"}, Traffic(),
         f"labelled {choice.EXCLUDE_LABEL}"),
        (READY, {"b"}, {"a"}, Traffic(), "not matched by the pool's node selector"),
        (READY, None, set(), Traffic(), "its agent is not announcing"),
        (READY, None, {"a"}, Traffic(local=True, endpoint_nodes=frozenset({"b"})),
         "no ready endpoint (externalTrafficPolicy: Local)"),
        (READY, None, {"a"}, Traffic(local=False, endpoint_nodes=frozenset()), ""),
    ],
)  # fmt: skip
def test_eligibility_and_why_not(
    view: NodeView, selected: set[str] | None, announcing: set[str], traffic: Traffic, reason: str
) -> None:
    assert choice.ineligible_reason(view, selected, announcing, traffic) == reason
    assert choice.eligible([view], selected, announcing, traffic) == (
        frozenset() if reason else {"a"}
    )


def test_a_shared_address_needs_a_node_that_suits_every_local_service() -> None:
    one = Traffic(local=True, endpoint_nodes=frozenset({"a", "b"}))
    two = Traffic(local=True, endpoint_nodes=frozenset({"b", "c"}))
    assert choice.shared([one, Traffic(), two]) == Traffic(True, frozenset({"b"}))
    assert choice.shared([Traffic(), Traffic()]) == Traffic()
    assert choice.shared([]) == Traffic()
