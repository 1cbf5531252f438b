"""The process host's choice of which units wait for a standalone binary's Lease, and the
permission that wait needs (pure parts of `local_ccm.runtime.host`)."""

from __future__ import annotations

import asyncio
from typing import Any

from local_ccm.kube.client import Client
from local_ccm.kube.nodes import Access
from local_ccm.lease.options import Election
from local_ccm.runtime.host import Host, Serving, Unit, _permissions
from local_ccm.runtime.promtext import Registry

LEASE = Election(lease_name="local-ccm-controller-manager", namespace="kube-system")
STANDALONE = {"node-ipam": "node-ipam-controller", "node-lifecycle": "node-lifecycle-controller"}


def unit(name: str) -> Unit:
    async def work(context: Any) -> None:
        return None

    return Unit(name, Client.__new__(Client), [], Registry(), work)


def host(lease: Election | None = LEASE, standalone: dict[str, str] | None = None) -> Host:
    leases = STANDALONE if standalone is None else standalone
    return Host("local-ccm-controller-manager", Serving("0", "0"), lease, asyncio.Event(),
                "manager_1", standalone=leases)  # fmt: skip


def test_a_unit_with_a_standalone_binary_waits_for_its_lease() -> None:
    h = host()
    assert h.waits_for(unit("node-ipam")) == "node-ipam-controller"
    assert h.waits_for(unit("node-lifecycle")) == "node-lifecycle-controller"
    assert h.waits_for(unit("service-lb-ipam")) == ""  # no standalone binary: starts at once


def test_no_wait_without_leader_election_or_for_the_process_s_own_lease() -> None:
    assert host(None).waits_for(unit("node-ipam")) == ""  # --leader-elect=false: act at once
    # A manager told to use the standalone's Lease holds it itself: nothing to wait for.
    same = host(standalone={"node-lifecycle": LEASE.lease_name})
    assert same.waits_for(unit("node-lifecycle")) == ""


def test_the_start_up_review_asks_to_read_the_standalone_leases_of_the_units_it_runs() -> None:
    wanted = _permissions(host(), [unit("node-ipam"), unit("service-lb-ipam")])
    group = "coordination.k8s.io"
    assert Access("get", "leases", group, "kube-system", "node-ipam-controller") in wanted
    assert not [a for a in wanted if a.name == "node-lifecycle-controller"]  # not running
    assert Access("update", "leases", group, "kube-system", LEASE.lease_name) in wanted
