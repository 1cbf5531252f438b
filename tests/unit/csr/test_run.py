"""The approver's write policy with an in-memory `CsrApi`: one condition per CSR, a conflict is
the worker's to retry (the next sync decides on a fresh read), a deleted CSR is done,
`--csr-deny=false` writes nothing."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from local_ccm.csr.api import Obj
from local_ccm.csr.core.decide import REASONS
from local_ccm.csr.core.model import Policy, project_node
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.csr.options import Settings
from local_ccm.csr.run import Controller
from local_ccm.kube.errors import Conflict, NotFound, Transient
from local_ccm.kube.informer import Change, ListWatch, Page
from local_ccm.kube.request import WatchEvent
from local_ccm.runtime.controller import DONE
from local_ccm.runtime.worker import MAX_CONFLICTS, Worker
from tests.fakes.clock import FakeClock
from tests.fakes.informer import Unused
from tests.support.csrs import csr_object, request_pem

NODE = {"metadata": {"name": "n1", "uid": "nu"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}}  # fmt: skip


class FakeCsrApi:
    """CSRs by name; `conflicts` answers that many approval writes with 409 (after which the
    stored CSR is `replaced_by`, as another writer would leave it)."""

    def __init__(self, conflicts: int = 0, replaced_by: Obj | None = None) -> None:
        self.stored: dict[str, Obj] = {}
        self.writes: list[Obj] = []
        self.events: list[Obj] = []
        self.conflicts, self.replaced_by = conflicts, replaced_by

    def list_watch(self) -> ListWatch:
        return Unused()

    async def get_csr(self, name: str) -> Obj:
        if name not in self.stored:
            raise NotFound(404, "NotFound", name)
        return self.stored[name]

    async def update_approval(self, csr: Obj) -> Obj:
        name = csr["metadata"]["name"]
        if name not in self.stored:
            raise NotFound(404, "NotFound", name)
        if self.conflicts:
            self.conflicts -= 1
            if self.replaced_by is not None:
                self.stored[name] = self.replaced_by
            raise Conflict(409, "Conflict", name)
        self.writes.append(csr)
        self.stored[name] = csr
        return csr

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        self.events.append(body)
        return body


def a_csr(ip: str = "192.0.2.10", name: str = "c1") -> Obj:
    obj = csr_object(name, request_pem("n1", ips=[ip]))
    obj["metadata"]["uid"] = f"u-{name}"
    obj["spec"] |= {"username": "system:node:n1", "groups": ["system:nodes"]}
    return obj


def controller(
    api: FakeCsrApi,
    objs: list[Obj],
    *,
    deny: bool = True,
    policy: Policy = Policy(),  # noqa: B008 (frozen)
    nodes: tuple[Obj, ...] = (NODE,),
) -> Controller:
    settings = Settings(deny=deny, policy=policy)
    made = Controller(api, Unused(), settings, metrics=CsrMetrics(), clock=FakeClock())
    made.csrs.prime(objs, "1")
    made.nodes.prime(nodes, "1")
    for obj in objs:
        api.stored[obj["metadata"]["name"]] = obj
    return made


def decisions(made: Controller, decision: str, reason: str) -> float | None:
    labels = {"decision": decision, "reason": reason}
    return made.metrics.registry.get_sample_value("local_ccm_csr_decisions_total", labels)


def conditions(obj: Obj) -> list[Any]:
    return list((obj.get("status") or {}).get("conditions") or [])


def test_every_decision_and_reason_is_exposed_at_zero_before_the_first() -> None:
    """A series that appears at 1 has no increase(): LocalCcmCsrDenied would miss the first
    denial of a process."""
    made = controller(FakeCsrApi(), [])
    assert "requester" in REASONS["deny"]
    for decision, reasons in REASONS.items():
        for reason in reasons:
            assert decisions(made, decision, reason) == 0, (decision, reason)


def test_a_matching_csr_gets_one_approved_condition_and_is_counted() -> None:
    api = FakeCsrApi()
    made = controller(api, [a_csr()])
    asyncio.run(made.sync("c1"))
    assert [c["type"] for c in conditions(api.stored["c1"])] == ["Approved"]
    assert decisions(made, "approve", "matches_node") == 1


def write_failures(made: Controller, code: str) -> float | None:
    labels = {"code": code}
    return made.metrics.registry.get_sample_value("local_ccm_csr_write_failures_total", labels)


def test_a_conflict_is_raised_for_the_worker_to_retry_and_is_no_write_failure() -> None:
    api = FakeCsrApi(conflicts=1)
    made = controller(api, [a_csr()])
    with pytest.raises(Conflict):
        asyncio.run(made.sync("c1"))
    assert api.writes == []
    assert decisions(made, "approve", "matches_node") == 0
    assert write_failures(made, "409") is None


def test_after_a_conflict_a_decision_made_meanwhile_is_left_alone() -> None:
    elsewhere = a_csr() | {"status": {"conditions": [{"type": "Denied", "status": "True"}]}}
    api = FakeCsrApi(conflicts=1, replaced_by=elsewhere)
    made = controller(api, [a_csr()])  # the cache keeps the undecided copy
    with pytest.raises(Conflict):
        asyncio.run(made.sync("c1"))
    assert asyncio.run(made.sync("c1")) == DONE  # decided on a fresh read, not the cache
    assert api.writes == []
    assert len(conditions(api.stored["c1"])) == 1


def test_after_a_conflict_an_undecided_csr_is_decided_again() -> None:
    api = FakeCsrApi(conflicts=1)
    made = controller(api, [a_csr()])
    with pytest.raises(Conflict):
        asyncio.run(made.sync("c1"))
    assert asyncio.run(made.sync("c1")) == DONE
    assert len(api.writes) == 1
    assert decisions(made, "approve", "matches_node") == 1


class Flaky(FakeCsrApi):
    """One conflict, then reads answer 503 while `reads_fail`, writes while `writes_fail`."""

    def __init__(self) -> None:
        super().__init__(conflicts=1)
        self.reads_fail, self.writes_fail = True, False

    async def get_csr(self, name: str) -> Obj:
        if self.reads_fail:
            raise Transient(503, "ServiceUnavailable", "down")
        return await super().get_csr(name)

    async def update_approval(self, csr: Obj) -> Obj:
        if self.writes_fail:
            raise Transient(503, "ServiceUnavailable", "down")
        return await super().update_approval(csr)


def test_only_a_failed_write_counts_as_a_write_failure_not_a_failed_read() -> None:
    api = Flaky()
    made = controller(api, [a_csr()])
    with pytest.raises(Conflict):
        asyncio.run(made.sync("c1"))
    with pytest.raises(Transient):
        asyncio.run(made.sync("c1"))  # the fresh read fails: the worker's to retry
    assert write_failures(made, "503") is None
    api.reads_fail, api.writes_fail = False, True
    with pytest.raises(Transient):
        asyncio.run(made.sync("c1"))  # read, then the write fails
    assert write_failures(made, "503") == 1


def test_a_write_after_a_fresh_read_waits_for_the_fence() -> None:
    api = FakeCsrApi(conflicts=1)
    made = controller(api, [a_csr()])
    asked: list[int] = []

    async def fence() -> None:
        asked.append(len(api.writes))

    made.fence = fence
    with pytest.raises(Conflict):
        asyncio.run(made.sync("c1"))
    assert asked == []  # a sync from the cache: the worker asked before it
    asyncio.run(made.sync("c1"))
    assert asked == [0]  # after the read, before the write
    assert len(api.writes) == 1


def test_a_csr_deleted_meanwhile_is_done() -> None:
    api = FakeCsrApi()
    made = controller(api, [a_csr()])
    del api.stored["c1"]
    assert asyncio.run(made.sync("c1")) == DONE
    assert api.writes == []


def test_without_deny_a_failing_csr_is_left_pending_and_counted_once() -> None:
    api = FakeCsrApi()
    made = controller(api, [a_csr(ip="192.0.2.99")], deny=False)
    asyncio.run(made.sync("c1"))
    asyncio.run(made.sync("c1"))
    assert api.writes == []
    assert decisions(made, "wait", "ip_san") == 1


def test_a_denial_names_the_offending_address() -> None:
    api = FakeCsrApi()
    made = controller(api, [a_csr(ip="192.0.2.99")])
    asyncio.run(made.sync("c1"))
    [condition] = conditions(api.stored["c1"])
    assert condition["type"] == "Denied"
    assert "192.0.2.99" in condition["message"]


def test_a_node_change_requeues_only_that_nodes_csrs() -> None:
    other = csr_object("c2", base64.b64decode(a_csr()["spec"]["request"]))
    other["spec"]["username"] = "system:node:n2"
    made = controller(FakeCsrApi(), [a_csr(), other])
    keys = made._on_node(Change("MODIFIED", "n1", project_node(NODE), project_node(NODE)))
    assert set(keys) == {"c1"}


def node_obj(name: str, *ips: str) -> Obj:
    addresses = [{"type": "InternalIP", "address": ip} for ip in ips]
    return {"metadata": {"name": name, "uid": f"u-{name}"}, "status": {"addresses": addresses}}


def test_an_address_another_node_shows_is_denied_from_the_cache() -> None:
    api = FakeCsrApi()
    made = controller(api, [a_csr()], nodes=(NODE, node_obj("n2", "192.0.2.10")))
    asyncio.run(made.sync("c1"))
    [condition] = conditions(api.stored["c1"])
    assert condition["type"] == "Denied"
    assert "also an address of Node 'n2'" in condition["message"]
    assert decisions(made, "deny", "ip_san_shared") == 1


def test_node_changes_from_the_watch_keep_the_address_index_current() -> None:
    api = FakeCsrApi()
    made = controller(api, [a_csr(name=n) for n in ("c1", "c2", "c3")])
    asyncio.run(made.sync("c1"))  # nobody else shows 192.0.2.10
    claimer = project_node(node_obj("n2", "192.0.2.10"))
    made._on_node(Change("ADDED", "n2", None, claimer))
    asyncio.run(made.sync("c2"))
    made._on_node(Change("MODIFIED", "n2", claimer, project_node(node_obj("n2", "192.0.2.11"))))
    asyncio.run(made.sync("c3"))  # n2 let go of the address
    verdicts = [conditions(api.stored[n])[0]["type"] for n in ("c1", "c2", "c3")]
    assert verdicts == ["Approved", "Denied", "Approved"]


def test_the_policy_reaches_the_decision() -> None:
    api = FakeCsrApi()
    long = a_csr(name="long")
    long["spec"]["expirationSeconds"] = 7200
    outside = a_csr(ip="192.0.2.99", name="outside")
    policy = Policy(ip_prefixes=(ipaddress.ip_network("192.0.2.0/28"),), max_expiration=3600)
    made = controller(api, [long, outside], policy=policy)
    asyncio.run(made.sync("long"))
    asyncio.run(made.sync("outside"))
    assert "--csr-max-expiration 1h0m0s" in conditions(api.stored["long"])[0]["message"]
    assert "--csr-ip-prefixes" in conditions(api.stored["outside"])[0]["message"]


class Quiet:
    """A ListWatch whose watch stays open and says nothing (the caches are primed)."""

    async def list_page(self, continue_token: str | None) -> Page:
        raise AssertionError("not listed")

    async def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        await asyncio.Event().wait()
        yield WatchEvent("BOOKMARK", {})  # never reached


class Failing(FakeCsrApi):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock, self.tried = clock, list[float]()

    def list_watch(self) -> ListWatch:
        return Quiet()

    async def update_approval(self, csr: Obj) -> Obj:
        self.tried.append(self.clock.monotonic())
        raise Transient(503, "ServiceUnavailable", "down")


def test_a_failed_write_retries_after_a_doubling_capped_delay() -> None:
    clock = FakeClock()
    api = Failing(clock)
    made = Controller(api, Quiet(), Settings(backoff=(1.0, 3.0)), metrics=CsrMetrics(),
                      clock=clock)  # fmt: skip
    made.csrs.prime([a_csr()], "1")
    made.nodes.prime([NODE], "1")
    api.stored["c1"] = a_csr()

    async def scenario() -> list[float]:
        worker = Worker(made, clock=clock, backoff=made.settings.backoff,
                        metrics=made.metrics.queue)  # fmt: skip
        worker.queue.add("c1")
        task = asyncio.create_task(worker.run())
        await clock.advance(7.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return [b - a for a, b in itertools.pairwise(api.tried)]

    assert asyncio.run(scenario()) == [1.0, 2.0, 3.0]
    failures = made.metrics.registry.get_sample_value(
        "local_ccm_csr_write_failures_total", {"code": "503"}
    )
    assert failures == 4


class Watched(FakeCsrApi):
    """`FakeCsrApi` whose list and watch a running worker can hold open."""

    def __init__(self, conflicts: int = 0) -> None:
        super().__init__(conflicts=conflicts)
        self.attempts = 0

    def list_watch(self) -> ListWatch:
        return Quiet()

    async def update_approval(self, csr: Obj) -> Obj:
        self.attempts += 1
        return await super().update_approval(csr)


def run_worker(api: Watched, clock: FakeClock, seconds: float) -> Controller:
    """The approver under the kit's worker for `seconds` of `clock`, one CSR queued."""
    made = Controller(api, Quiet(), Settings(backoff=(1.0, 3.0)), metrics=CsrMetrics(),
                      clock=clock)  # fmt: skip
    made.csrs.prime([a_csr()], "1")
    made.nodes.prime([NODE], "1")
    api.stored["c1"] = a_csr()

    async def scenario() -> None:
        worker = Worker(made, clock=clock, backoff=made.settings.backoff,
                        metrics=made.metrics.queue)  # fmt: skip
        worker.queue.add("c1")
        task = asyncio.create_task(worker.run())
        await clock.advance(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    return made


def test_the_worker_retries_a_conflict_at_once_and_the_csr_is_approved_once() -> None:
    api = Watched(conflicts=2)
    made = run_worker(api, FakeClock(), 0.5)  # less than the first backoff step
    assert api.attempts == 3
    assert [c["type"] for c in conditions(api.stored["c1"])] == ["Approved"]
    assert decisions(made, "approve", "matches_node") == 1
    assert [e["reason"] for e in api.events] == ["KubeletServingApproved"]
    assert write_failures(made, "409") is None


def test_conflicts_in_a_row_are_retried_by_the_worker_alone() -> None:
    api = Watched(conflicts=1000)
    run_worker(api, FakeClock(), 0.5)
    assert api.attempts == 1 + MAX_CONFLICTS  # not MAX_CONFLICTS inside each of those syncs
