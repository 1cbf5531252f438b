"""The index of which Nodes show each address and name: kept current by puts and drops as the
Node watch delivers them, never a scan of every Node per CSR."""

from __future__ import annotations

import ipaddress

from local_ccm.csr.core.claims import Claims
from local_ccm.csr.core.model import IPAddress, Node

A, B = ipaddress.ip_address("192.0.2.1"), ipaddress.ip_address("2001:db8::2")


def node(name: str, *ips: IPAddress, dns: tuple[str, ...] = ()) -> Node:
    return Node(name, f"uid-{name}", True, frozenset(ips), frozenset(dns))


def test_others_are_the_nodes_showing_a_san_except_the_asker_sorted() -> None:
    claims = Claims([node("n1", A), node("n3", A, B), node("n2", A)])
    assert claims.others(A, "n1") == ("n2", "n3")
    assert claims.others(B, "n3") == ()
    assert claims.others(B, "n1") == ("n3",)


def test_dns_names_are_indexed_apart_from_addresses() -> None:
    claims = Claims([node("n1", dns=("n1", "192.0.2.1")), node("n2", A)])
    assert claims.others("n1", "n2") == ("n1",)
    assert claims.others(A, "n1") == ("n2",)  # the string "192.0.2.1" is a name, not A
    assert claims.others("192.0.2.1", "n2") == ("n1",)


def test_a_put_replaces_what_the_node_showed_before() -> None:
    claims = Claims([node("n1", A)])
    claims.put(node("n1", B))  # the address moved on the same Node
    assert claims.others(A, "x") == ()
    assert claims.others(B, "x") == ("n1",)


def test_a_drop_forgets_the_node_and_an_unknown_drop_is_harmless() -> None:
    claims = Claims([node("n1", A), node("n2", A)])
    claims.drop("n1")
    claims.drop("never-seen")
    assert claims.others(A, "x") == ("n2",)
    claims.drop("n2")
    assert claims.others(A, "x") == ()
    assert len(claims) == 0


def test_a_legitimate_move_is_shared_until_the_old_node_lets_go() -> None:
    claims = Claims([node("old", A), node("new")])
    claims.put(node("new", A))
    assert claims.others(A, "new") == ("old",)
    claims.put(node("old"))
    assert claims.others(A, "new") == ()
