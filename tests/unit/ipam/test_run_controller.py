"""The loop of node-ipam-controller against an in-memory `IpamApi`.

The fake stands in for API semantics only as far as the loop relies on them (podCIDRs
set-once, the uid `test`); the real semantics are proven in tests/integration/ipam.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from ipaddress import ip_network

import pytest

from local_ccm.ipam.api import Obj
from local_ccm.ipam.core.model import FINALIZER, default_pool, project_node
from local_ccm.ipam.run import Controller
from local_ccm.kube.errors import Conflict, Invalid, NotFound, Transient
from local_ccm.kube.informer import Change
from local_ccm.runtime.metrics import WATCH_REASONS
from tests.fakes.ipam import (
    FakeApi,
    cidrs,
    node_obj,
    nothing,
    pool_obj,
    run_scenario,
    settle,
)

# ---------------------------------------------------------------- start-up


def test_finalizer_first_then_recovery_then_lowest_free_in_creation_order() -> None:
    held = node_obj("held", {"a": "1"}, ["10.0.0.0/24"])
    api = FakeApi([held, node_obj("n1", {"a": "1"}), node_obj("n2", {"a": "1"})],
                  [pool_obj("p", ipv4="10.0.0.0/22", labels={"a": "1"})])  # fmt: skip
    controller = run_scenario(api, nothing)
    assert api.pool_patches[0][1][0] == {"op": "test", "path": "/metadata/resourceVersion",
                                         "value": "5"}  # fmt: skip
    assert (cidrs(api, "n1"), cidrs(api, "n2")) == (["10.0.1.0/24"], ["10.0.2.0/24"])
    assert [n for n, _ in api.node_patches] == ["n1", "n2"]  # the held Node is never patched
    assert controller.ready() == (True, "ok")


def test_a_node_added_while_the_finalizers_settle_waits_for_its_pool() -> None:
    """Not the flag pool: the ClusterCIDR that selects it serves it once its finalizer is
    written, as for the Nodes of the recovery."""
    api = FakeApi([], [pool_obj("p", ipv4="10.0.0.0/22", labels={"a": "1"})])
    api.pool_patch_gate = gate = asyncio.Event()
    flags = default_pool([ip_network("10.96.0.0/16")], 24, 120)

    async def scenario(controller: Controller, api: FakeApi) -> None:
        node = node_obj("n", {"a": "1"})
        api.nodes["n"] = node
        api.send("nodes", "ADDED", node)
        await settle(20)
        assert api.node_patches == []  # held while p's finalizer is on its way
        gate.set()
        await settle()

    run_scenario(api, scenario, default_pool=flags)
    assert cidrs(api, "n") == ["10.0.0.0/24"]


def test_patch_is_guarded_by_uid_and_ipv4_comes_first() -> None:
    api = FakeApi([node_obj("n", {"a": "1"})],
                  [pool_obj("p", ipv4="10.0.0.0/22", ipv6="fd00::/118",
                            labels={"a": "1"})])  # fmt: skip
    run_scenario(api, nothing)
    ((_, ops),) = api.node_patches
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": api.nodes["n"]["metadata"]["uid"]},
        {"op": "add", "path": "/spec/podCIDR", "value": "10.0.0.0/24"},
        {"op": "add", "path": "/spec/podCIDRs", "value": ["10.0.0.0/24", "fd00::/120"]},
    ]


def test_flags_only_mode_without_the_crd() -> None:
    api = FakeApi([node_obj("n")], served=False)
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)
    controller = run_scenario(api, nothing, default_pool=pool)
    assert cidrs(api, "n") == ["10.99.0.0/24"]
    assert "clustercidrs" not in api.queues
    assert controller.ready() == (True, "ok")


def test_not_ready_without_any_pool_source() -> None:
    controller = run_scenario(FakeApi([node_obj("n")], served=False), nothing)
    ok, why = controller.ready()
    assert not ok
    assert "nothing can be allocated" in why


def test_overlapping_cidrs_at_start_up_are_conflicts_and_untouched() -> None:
    api = FakeApi([node_obj("c1", cidrs=["10.83.0.0/24"]), node_obj("c2", cidrs=["10.83.0.0/25"])])
    controller = run_scenario(api, nothing)
    assert api.reasons("c1").count("CIDRConflict") == 1
    assert api.reasons("c2").count("CIDRConflict") == 1
    assert controller.allocator.ledger.conflict_count() == 1
    assert not api.node_patches


# ---------------------------------------------------------------- write outcomes


def test_conflict_then_get_showing_our_cidrs_commits() -> None:
    api = FakeApi([node_obj("n")])
    api.fail_patch = [Transient(0, "Timeout", "timed out")]
    api.land_before_failing = True
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)
    controller = run_scenario(api, nothing, default_pool=pool)
    assert cidrs(api, "n") == ["10.99.0.0/24"]
    assert len(api.node_patches) == 1  # the GET told us it landed: no second PATCH
    assert not controller.allocator.is_pending(api.nodes["n"]["metadata"]["uid"])


def test_unknown_outcome_keeps_the_reservation_until_known() -> None:
    api = FakeApi([node_obj("n"), node_obj("m")])
    api.fail_patch = [Transient(503, "ServiceUnavailable", "down")]
    api.fail_get = [Transient(0, "Timeout", "x"), Transient(0, "Timeout", "y")]
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)
    run_scenario(api, nothing, default_pool=pool)
    # n's first write failed without landing; the GETs failed too, so its block stayed held
    # and m never got it; the retry then wrote the same block again.
    assert sorted([cidrs(api, "n"), cidrs(api, "m")]) == [["10.99.0.0/24"], ["10.99.1.0/24"]]


def test_node_gone_during_the_write_releases_the_block() -> None:
    api = FakeApi([node_obj("n")])
    api.fail_patch = [NotFound(404, "NotFound", "n")]
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)
    controller = run_scenario(api, nothing, default_pool=pool)
    assert controller.allocator.usage(pool.name).families[0].free == 256  # type: ignore[union-attr]


def test_foreign_cidrs_found_after_a_rejected_write() -> None:
    api = FakeApi([node_obj("n")])
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)

    async def scenario(controller: Controller, api: FakeApi) -> None:
        return None

    api.fail_patch = [Invalid(422, "Invalid", "podCIDRs already set")]
    original = api.get_node

    async def get_with_theirs(name: str) -> Obj:
        api.nodes[name]["spec"] = {"podCIDR": "10.99.7.0/24", "podCIDRs": ["10.99.7.0/24"]}
        api.nodes[name]["metadata"]["managedFields"] = [
            {"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {"f:podCIDRs": {}}}}
        ]
        return await original(name)

    api.get_node = get_with_theirs  # type: ignore[method-assign]
    controller = run_scenario(api, scenario, default_pool=pool)
    assert cidrs(api, "n") == ["10.99.7.0/24"]
    assert "CIDRAssignedByOtherAllocator" in api.reasons("n")
    usage = controller.allocator.usage(pool.name)
    assert usage is not None
    assert usage.families[0].allocated == 1  # theirs, ours released


def test_a_successful_allocation_posts_no_event_and_a_waiting_node_still_does() -> None:
    """No CIDRAssigned [compat]: neither kube-controller-manager's range allocator nor the
    Go node-ipam-controller posts one (docs/ipam.md, "No Event for a successful allocation");
    the failure Events stay."""
    api = FakeApi([node_obj("n1", {"a": "1"}), node_obj("n2", {"a": "1"})],
                  [pool_obj("p", ipv4="10.0.0.0/24", labels={"a": "1"})])  # fmt: skip
    run_scenario(api, nothing)
    assert cidrs(api, "n1") == ["10.0.0.0/24"]
    assert api.reasons("n1") == []
    assert cidrs(api, "n2") == []
    assert api.reasons("n2") == ["CIDRNotAvailable"]
    assert all(e["reason"] != "CIDRAssigned" for e in api.events)


def test_the_echo_of_our_own_write_is_no_news_but_any_other_change_is() -> None:
    """The watch shows our PATCH as its answer did, and the outcome recorded that answer: no
    key (one sync fewer per allocated Node); a Node that then differs is looked at again."""
    blank = node_obj("n", {"a": "1"})
    api = FakeApi([blank], [pool_obj("p", ipv4="10.0.0.0/24", labels={"a": "1"})])
    controller = run_scenario(api, nothing)
    before, echo = project_node(blank), project_node(api.nodes["n"])
    assert echo.pod_cidrs == (ip_network("10.0.0.0/24"),)
    assert controller._node_changed(Change("MODIFIED", "n", before, echo)) == []
    relabelled = copy.deepcopy(api.nodes["n"])
    relabelled["metadata"]["labels"]["b"] = "2"
    later = project_node(relabelled)
    assert controller._node_changed(Change("MODIFIED", "n", echo, later)) == ["n"]
    assert controller._node_changed(Change("DELETED", "n", later, None)) == ["n"]


def test_three_failures_emit_cidr_assignment_failed() -> None:
    api = FakeApi([node_obj("n")])
    api.fail_patch = [Transient(500, "InternalError", "boom")] * 3
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)
    run_scenario(api, nothing, default_pool=pool)
    assert api.reasons("n").count("CIDRAssignmentFailed") == 1
    assert cidrs(api, "n") == ["10.99.0.0/24"]


# ---------------------------------------------------------------- watch events


def test_release_only_when_gone_then_waiting_node_served() -> None:
    n1 = node_obj("n1", {"a": "1"})
    api = FakeApi([n1], [pool_obj("p", ipv4="10.0.0.0/24", labels={"a": "1"})])

    async def scenario(controller: Controller, api: FakeApi) -> None:
        n2 = node_obj("n2", {"a": "1"})
        api.nodes["n2"] = n2
        api.send("nodes", "ADDED", n2)
        await settle()
        assert cidrs(api, "n2") == []
        assert "CIDRNotAvailable" in api.reasons("n2")
        terminating = copy.deepcopy(api.nodes["n1"])
        terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        api.send("nodes", "MODIFIED", terminating)
        await settle()
        assert cidrs(api, "n2") == []  # deletionTimestamp alone releases nothing
        api.send("nodes", "DELETED", api.nodes.pop("n1"))
        await settle()
        assert cidrs(api, "n2") == ["10.0.0.0/24"]

    run_scenario(api, scenario)


def test_foreign_writer_is_reported_and_reserved() -> None:
    api = FakeApi([], [pool_obj("p", ipv4="10.82.0.0/16", labels={"k": "1"})])

    async def scenario(controller: Controller, api: FakeApi) -> None:
        foreign = node_obj("f", cidrs=["10.82.0.0/24"], managers=["kube-controller-manager"])
        api.nodes["f"] = foreign
        api.send("nodes", "ADDED", foreign)
        k = node_obj("k", {"k": "1"})
        api.nodes["k"] = k
        api.send("nodes", "ADDED", k)
        await settle()

    run_scenario(api, scenario)
    assert "CIDRAssignedByOtherAllocator" in api.reasons("f")
    message = next(
        e["message"] for e in api.events if e["reason"] == "CIDRAssignedByOtherAllocator"
    )
    assert "kube-controller-manager" in message
    assert cidrs(api, "k") == ["10.82.1.0/24"]


def test_new_pool_serves_waiting_node_after_its_finalizer() -> None:
    api = FakeApi([node_obj("n", {"e": "1"})], [])

    async def scenario(controller: Controller, api: FakeApi) -> None:
        assert cidrs(api, "n") == []
        pool = pool_obj("more", ipv4="10.78.0.0/24", labels={"e": "1"})
        api.pools["more"] = pool
        api.send("clustercidrs", "ADDED", pool)
        await settle()

    run_scenario(api, scenario)
    assert [name for name, _ in api.pool_patches] == ["more"]
    assert cidrs(api, "n") == ["10.78.0.0/24"]


def test_terminating_pool_loses_its_finalizer_once_empty() -> None:
    n = node_obj("n", {"a": "1"}, ["10.0.0.0/24"])
    pool = pool_obj("p", ipv4="10.0.0.0/24", labels={"a": "1"}, finalizers=[FINALIZER],
                    deleting=True)  # fmt: skip
    api = FakeApi([n], [pool])

    async def scenario(controller: Controller, api: FakeApi) -> None:
        assert api.pool_patches == []  # still owns a CIDR
        assert "WaitingForNodes" in api.reasons("p")
        api.send("nodes", "DELETED", api.nodes.pop("n"))
        await settle()

    run_scenario(api, scenario)
    ((_, ops),) = api.pool_patches
    assert ops == [{"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
                   {"op": "remove", "path": "/metadata/finalizers/0"}]  # fmt: skip


def test_invalid_and_frozen_pools_are_reported_not_used() -> None:
    bad = pool_obj("zero", bits=10, ipv4="10.0.0.0/24", labels={"z": "1"})
    edited = pool_obj("edited", ipv4="10.84.0.0/23", labels={"z": "1"}, finalizers=[FINALIZER],
                      generation=2)  # fmt: skip
    api = FakeApi([node_obj("n", {"z": "1"})], [bad, edited])
    pool = default_pool((ip_network("10.96.0.0/12"),), 24, 64)
    run_scenario(api, nothing, default_pool=pool, status_interval=0.5)
    assert cidrs(api, "n") == ["10.96.0.0/24"]
    assert "InvalidClusterCIDR" in api.reasons("zero")
    assert "SpecChanged" in api.reasons("edited")
    assert api.pool_patches == []  # no finalizer for an invalid one; edited has it
    ready = {name: s["conditions"][0]["reason"] for name, s in api.statuses}
    assert ready == {"zero": "Invalid", "edited": "SpecChanged"}


def test_status_is_written_once_per_change() -> None:
    api = FakeApi([node_obj("n", {"s": "1"})],
                  [pool_obj("st", ipv4="10.81.0.0/22", ipv6="fd00:81::/118",
                            labels={"s": "1"})])  # fmt: skip
    run_scenario(api, nothing, status_interval=1.0)
    name, status = api.statuses[-1]
    assert name == "st"
    assert status["ipv4"] == {"blockPrefixLength": 24, "capacity": 4, "allocated": 1,
                              "unavailable": 0, "free": 3}  # fmt: skip
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Exhausted"]
    assert all(c["lastTransitionTime"] == "2026-01-01T00:00:00Z" for c in status["conditions"])
    assert len(api.statuses) == len({repr(s) for _, s in api.statuses})  # never the same twice


@pytest.mark.parametrize("reuse_delay", [0.0, 30.0])
def test_reuse_delay_quarantines_released_blocks(reuse_delay: float) -> None:
    api = FakeApi([node_obj("a", cidrs=["10.0.0.0/25"]), node_obj("b", cidrs=["10.0.0.128/25"])],
                  [pool_obj("p", bits=7, ipv4="10.0.0.0/24")])  # fmt: skip

    async def scenario(controller: Controller, api: FakeApi) -> None:
        api.send("nodes", "DELETED", api.nodes.pop("a"))
        c = node_obj("c")
        api.nodes["c"] = c
        api.send("nodes", "ADDED", c)
        await settle(20)  # less than the autojump's idle threshold: no time has passed
        assert cidrs(api, "c") == ([] if reuse_delay else ["10.0.0.0/25"])
        await settle(50 * 40)  # about 40 jumps of the 1 s status tick: past the delay

    run_scenario(api, scenario, reuse_delay=reuse_delay)
    assert cidrs(api, "c") == ["10.0.0.0/25"]


# ---------------------------------------------------------------- on the kit


def test_a_refused_finalizer_write_is_looked_at_again_not_slept_on() -> None:
    api = FakeApi([node_obj("n", {"a": "1"})],
                  [pool_obj("p", ipv4="10.0.0.0/24", labels={"a": "1"})])  # fmt: skip
    original = api.patch_cluster_cidr
    refusals = [Conflict(409, "Conflict", "changed"), Transient(500, "InternalError", "boom")]

    async def refused_twice(name: str, ops: list[Obj]) -> Obj:
        if refusals:
            api.pool_patches.append((name, ops))
            raise refusals.pop(0)
        return await original(name, ops)

    api.patch_cluster_cidr = refused_twice  # type: ignore[method-assign]
    run_scenario(api, nothing)
    assert [name for name, _ in api.pool_patches] == ["p", "p", "p"]
    assert FINALIZER in api.pools["p"]["metadata"]["finalizers"]
    assert cidrs(api, "n") == ["10.0.0.0/24"]


def test_concurrent_node_syncs_bounds_the_writes_in_flight() -> None:
    api = FakeApi([node_obj(f"n{i}") for i in range(6)])
    original = api.patch_node
    flight = {"now": 0, "most": 0}

    async def slow(name: str, operations: Sequence[Obj]) -> Obj:
        flight["now"] += 1
        flight["most"] = max(flight["most"], flight["now"])
        await settle(5)
        flight["now"] -= 1
        return await original(name, operations)

    api.patch_node = slow  # type: ignore[method-assign]
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)
    run_scenario(api, nothing, default_pool=pool, concurrent_node_syncs=2)
    assert sorted(c for n in api.nodes for c in cidrs(api, n)) == [
        f"10.99.{i}.0/24" for i in range(6)
    ]
    assert flight["most"] == 2


def test_the_crd_installed_later_is_used_without_a_restart() -> None:
    api = FakeApi([node_obj("n", {"c": "1"})], served=False)
    pool = default_pool((ip_network("10.99.0.0/16"),), 24, 64)

    async def scenario(controller: Controller, api: FakeApi) -> None:
        assert cidrs(api, "n") == ["10.99.0.0/24"]
        api.served = True
        api.pools["crd"] = pool_obj("crd", ipv4="10.98.0.0/24", labels={"c": "1"})
        while "clustercidrs" not in api.queues or not api.pool_patches:
            await settle(60)  # past the discovery interval
        later = node_obj("later", {"c": "1"})
        api.nodes["later"] = later
        api.send("nodes", "ADDED", later)
        await settle()
        assert controller.ready() == (True, "ok")

    controller = run_scenario(api, scenario, default_pool=pool, discovery_interval=5.0)
    assert cidrs(api, "later") == ["10.98.0.0/24"]
    restarts = [
        controller.metrics.registry.get_sample_value(
            "local_ccm_watch_restarts_total",
            {"controller": "node-ipam", "resource": "clustercidrs", "reason": reason},
        )
        for reason in WATCH_REASONS
    ]
    assert restarts == [0] * len(WATCH_REASONS)  # discovery ending the empty watch is none
