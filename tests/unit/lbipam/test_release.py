"""The controller on the kit's workers against a fake API: Services deleted at once cost no
write of ours, and thousands still carrying the finalizer of an earlier release have it removed
side by side; the address decisions still come one at a time in the queue's order, and a
terminating Service's address is free for another only once the Service is gone (its DELETED
event), never when its finalizer PATCH lands."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from local_ccm.kube.informer import Page
from local_ccm.lbipam.api import Obj
from local_ccm.lbipam.core.writes import FINALIZER
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lbipam.options import Settings
from local_ccm.lbipam.run import Controller
from local_ccm.runtime.worker import Worker
from tests.fakes.clock import FakeClock, settle
from tests.fakes.informer import FakeListWatch
from tests.unit.lbipam.test_run import POOL, FakeLbApi, ips, service

GONE_AT = "2026-01-01T00:01:00Z"
NAMESPACE = {"metadata": {"name": "ns", "uid": "nsu", "resourceVersion": "1"}}


class Api(FakeLbApi):
    """`FakeLbApi` with the informers' sources, Service PATCHes that wait at a gate the test
    opens (`gates`: by key, "*" for every one), how many waited at once, the apiserver's
    deletion (a Service being deleted whose last finalizer goes is gone) and, at every
    status write, any address another existing Service already shows."""

    def __init__(self) -> None:
        super().__init__()
        self.sources = {what: FakeListWatch() for what in ("services", "pools", "namespaces")}
        self.gates: dict[str, asyncio.Event] = {}
        self.in_flight = self.most_in_flight = 0
        self.decided: list[str] = []  # Services in the order their status was written
        self.twice: list[str] = []  # "address: one key, another key"

    def list_watch(self, what: str) -> FakeListWatch:
        return self.sources[what]

    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        key = f"{namespace}/{name}"
        gate = self.gates.get(key) or self.gates.get("*")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if gate is not None:
                await gate.wait()
            return self._apply(key, patch)
        finally:
            self.in_flight -= 1

    async def patch_service_status(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        key = f"{namespace}/{name}"
        answer = self._apply(key, patch)
        self.decided.append(key)
        for ip in ips(answer):
            self.twice += [f"{ip}: {key}, {other}" for other, obj in self.stored.items()
                           if other != key and ip in ips(obj)]  # fmt: skip
        return answer

    def _apply(self, key: str, patch: list[Obj]) -> Obj:
        answer = super()._apply(key, patch)
        meta = answer["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.stored[key]  # the apiserver deletes it with the last finalizer
        return answer


def terminating(name: str, address: str, finalizer: str = FINALIZER) -> Obj:
    """A Service being deleted that still shows `address` and carries `finalizer` (by
    default the one an earlier release added)."""
    obj = service(name, f"u{name}")
    obj["metadata"]["deletionTimestamp"] = GONE_AT
    obj["metadata"]["finalizers"] = [finalizer]
    obj["status"] = {"loadBalancer": {"ingress": [{"ip": address, "ipMode": "VIP"}]}}
    return obj


def fresh(name: str, second: int = 0) -> Obj:
    """A new LoadBalancer Service: no address."""
    obj = service(name, f"u{name}")
    obj["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{second:02d}Z"
    return obj


Scenario = Callable[[Controller], Awaitable[None]]


def run(api: Api, services: list[Obj], scenario: Scenario, pool: Obj = POOL) -> Controller:
    """The controller (default settings, no kube-vip ConfigMap) under the kit's worker with
    as many workers as the composition gives it, `services` listed, until `scenario` ends."""
    for obj in services:
        api.stored[f"ns/{obj['metadata']['name']}"] = copy.deepcopy(obj)
    api.sources["services"].pages.append(Page(services, "1"))
    api.sources["pools"].pages.append(Page([pool], "1"))
    api.sources["namespaces"].pages.append(Page([NAMESPACE], "1"))
    nodes = FakeListWatch()
    nodes.pages.append(Page([], "1"))
    clock = FakeClock()
    made = Controller(api, nodes, Settings(kubevip=None), metrics=LbMetrics(), clock=clock)

    async def main() -> None:
        worker = Worker(made, clock=clock, backoff=made.settings.backoff,
                        workers=made.settings.workers)  # fmt: skip
        task = asyncio.create_task(worker.run())
        try:
            await settle()
            await scenario(made)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return made


def gone(api: Api, obj: Obj) -> None:
    """The Service's DELETED event, as the watch delivers it once the apiserver removed it."""
    api.sources["services"].streams[-1].send("DELETED", obj)


def held(made: Controller, key: str) -> list[str]:
    assert made.ledger is not None
    return [str(a) for a in made.ledger.held_by(key)]


def test_services_deleted_at_once_cost_no_write_and_stay_held_until_gone() -> None:
    """Services being deleted (another finalizer keeps them a while) are not written to:
    nothing holds their deletion, and what they show stays held until each is gone."""
    count = 8
    old = [terminating(f"s{n}", f"198.18.0.{n + 1}", "other.io/hold") for n in range(count)]
    api = Api()

    async def scenario(made: Controller) -> None:
        assert made.ledger is not None
        assert made.ledger.services() == [f"ns/s{n}" for n in range(count)]
        for obj in old[:3]:
            gone(api, obj)
        await settle()

    made = run(api, old, scenario)
    assert api.patches == 0, "a write to a Service being deleted"
    assert made.ledger is not None
    assert made.ledger.services() == [f"ns/s{n}" for n in range(3, count)], "the gone released"


def test_old_finalizers_of_services_deleted_at_once_are_removed_side_by_side() -> None:
    """Every terminating Service's PATCH removing an earlier release's finalizer is in flight
    at the same time (the API answers none until all have arrived), not one round trip after
    another."""
    count = 8
    old = [terminating(f"s{n}", f"198.18.0.{n + 1}") for n in range(count)]
    api = Api()

    async def scenario(made: Controller) -> None:
        assert api.most_in_flight == count, f"{api.most_in_flight} of {count} PATCHes at once"
        api.gates["*"].set()
        await settle()

    api.gates["*"] = asyncio.Event()
    made = run(api, old, scenario)
    assert api.stored == {}, "every Service gone"
    assert made.ledger is not None
    assert made.ledger.services() == [f"ns/s{n}" for n in range(count)], "none released yet"


def test_address_decisions_are_taken_in_the_queue_s_order_while_writes_overlap() -> None:
    """`a` is queued before `b`; its PATCH removing an earlier release's finalizer is slow,
    `b` has none to remove. `b` still decides after `a`: `a` gets the first address, `b` the
    second."""
    api = Api()
    first = fresh("a")
    first["metadata"]["finalizers"] = [FINALIZER]

    async def scenario(made: Controller) -> None:
        assert api.decided == [], "b decided before a, which was queued first"
        api.gates["ns/a"].set()
        await settle()

    api.gates["ns/a"] = asyncio.Event()
    run(api, [first, fresh("b", 1)], scenario)
    assert api.decided == ["ns/a", "ns/b"]
    assert api.stored["ns/a"]["metadata"]["finalizers"] == [], "the old finalizer kept"
    assert ips(api.stored["ns/a"]) == ["198.18.0.1"]
    assert ips(api.stored["ns/b"]) == ["198.18.0.2"]


@pytest.mark.parametrize("patch_answer", ["deleted", "NotFound"])
def test_a_terminating_service_s_address_is_free_only_once_it_is_gone(patch_answer: str) -> None:
    """One address, held by `old` being deleted; `new` wants it. When the finalizer PATCH has
    landed (or answered NotFound: gone already) but the watch has not yet delivered the
    DELETED event, the cache still shows `old` and its address stays held: `new` waits. The
    DELETED event frees it, and `new`, woken, gets it; no write ever shows it twice."""
    pool: dict[str, Any] = copy.deepcopy(POOL)
    pool["spec"] = {"addresses": ["198.18.0.7/32"]}
    old, new = terminating("old", "198.18.0.7"), fresh("new", 30)
    api = Api()
    if patch_answer == "NotFound":
        api.gates["ns/old"] = asyncio.Event()

    async def scenario(made: Controller) -> None:
        if patch_answer == "NotFound":
            del api.stored["ns/old"]  # another writer removed the last finalizer meanwhile
            api.gates["ns/old"].set()
            await settle()
        assert "ns/old" not in api.stored, "gone from the API"
        assert held(made, "ns/old") == ["198.18.0.7"], "released before the DELETED event"
        assert ips(api.stored["ns/new"]) == []
        assert "ns/new" in made.waiting
        gone(api, old)
        await settle()

    made = run(api, [old, new], scenario, pool)
    assert ips(api.stored["ns/new"]) == ["198.18.0.7"]
    assert held(made, "ns/old") == []
    assert held(made, "ns/new") == ["198.18.0.7"]
    assert api.twice == []
