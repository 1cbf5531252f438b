"""The ledger gives a Service back what it held before a decision whose write was refused."""

from __future__ import annotations

import ipaddress

from local_ccm.lbipam.core.ledger import Holder, Ledger

A, B, C = (ipaddress.ip_address(f"192.0.2.{i}") for i in (1, 2, 3))


def holder(service: str, group: str | None = None) -> Holder:
    return Holder(service, group, frozenset())


def test_restore_gives_back_what_entries_recorded_and_frees_what_came_since() -> None:
    ledger = Ledger()
    ledger.hold([(A, holder("ns/a", "key:k")), (A, holder("ns/b", "key:k"))])
    before = ledger.entries("ns/a")
    assert before == [(A, holder("ns/a", "key:k"))]
    ledger.hold([(B, holder("ns/a")), (A, holder("ns/a", "key:k"))])  # a decision reserved B
    ledger.restore("ns/a", before)
    assert ledger.held_by("ns/a") == (A,)
    assert ledger.holders(B) == []  # free again
    assert sorted(h.service for h in ledger.holders(A)) == ["ns/a", "ns/b"]


def test_restore_to_nothing_releases_the_service() -> None:
    ledger = Ledger()
    before = ledger.entries("ns/a")
    assert before == []
    ledger.hold([(C, holder("ns/a"))])
    ledger.restore("ns/a", before)
    assert ledger.held_by("ns/a") == ()
    assert ledger.holders(C) == []
