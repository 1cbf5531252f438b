"""The process around the loop (local_ccm.runtime.process.run_elected):
graceful stop releases the Lease and exits 0; a lost lease exits 3; only the leader acts."""

from __future__ import annotations

import asyncio
import random

from local_ccm.lease.election import ElectionConfig
from local_ccm.lease.elector import LeaderContext, LeaderElector
from local_ccm.lifecycle.health import leader_callback
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.run import Controller
from local_ccm.runtime.metrics import LeaderMetrics
from local_ccm.runtime.process import run_elected
from local_ccm.runtime.worker import Worker
from tests.fakes.clock import FakeClock, settle
from tests.fakes.lease import FakeLeaseApi
from tests.fakes.lifecycle import FakeProber, raw_node
from tests.fakes.nodes import FakeNodeApi
from tests.unit.lifecycle.test_run_loop import config

ELECTION = ElectionConfig(4.0, 3.0, 0.5, "me_0000000000000001")


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.lease = FakeLeaseApi(clock=self.clock)
        self.nodes = FakeNodeApi(nodes=[raw_node("w1", ready="True")])
        self.metrics = LifecycleMetrics()
        self.contexts: list[LeaderContext | None] = []
        self.controllers: list[Controller] = []
        self.leading = LeaderMetrics("node-lifecycle-controller")
        callback = leader_callback(self.metrics)

        def changed(leading: bool) -> None:
            callback(leading)
            self.leading.leading(leading)

        self.elector = LeaderElector(
            self.lease, ELECTION, self.clock, random.Random(1), on_leader_change=changed
        )

    async def work(self, context: LeaderContext | None) -> None:
        self.contexts.append(context)
        made = Controller(config(), self.nodes, FakeProber(), self.clock, metrics=self.metrics,
                          identity=ELECTION.identity)  # fmt: skip
        self.controllers.append(made)
        await Worker(made, clock=self.clock, backoff=(1.0, 1.0),
                     may_write=context.may_write if context else lambda: True).run()  # fmt: skip

    def synced(self) -> bool:
        """The term's controller is ready: its Node cache listed."""
        return bool(self.controllers) and self.controllers[-1].ready()[0]

    def leader(self) -> float:
        labels = {"name": "node-lifecycle-controller"}
        value = self.leading.registry.get_sample_value("leader_election_master_status", labels)
        return value or 0.0


def test_graceful_stop_releases_the_lease_and_exits_0() -> None:
    async def main() -> tuple[int, World]:
        world, stop = World(), asyncio.Event()
        run = asyncio.create_task(run_elected(world.work, elector=world.elector, stop=stop))
        await world.clock.run_until(world.synced, timeout=5)
        assert world.leader() == 1
        stop.set()
        await settle()
        return await run, world

    code, world = asyncio.run(main())
    assert code == 0
    spec = world.lease.server.spec(world.lease.namespace, world.lease.name)
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert world.leader() == 0


def test_failed_renewals_for_the_renew_deadline_exit_3() -> None:
    async def main() -> tuple[int, World]:
        world = World()
        stop = asyncio.Event()
        run = asyncio.create_task(run_elected(world.work, elector=world.elector, stop=stop))
        await world.clock.run_until(world.synced, timeout=5)
        world.lease.outage = True
        await world.clock.run_until(run.done, timeout=10)
        return await run, world

    code, world = asyncio.run(main())
    assert code == 3
    assert world.leader() == 0
    assert (
        world.metrics.registry.get_sample_value("local_ccm_lifecycle_leader_transitions_total") == 1
    )


def test_without_leader_election_it_acts_at_once_and_stops_with_0() -> None:
    async def main() -> int:
        world, stop = World(), asyncio.Event()
        run = asyncio.create_task(run_elected(world.work, elector=None, stop=stop))
        await world.clock.run_until(world.synced, timeout=5)
        assert world.contexts == [None]
        stop.set()
        await settle()
        return await run

    assert asyncio.run(main()) == 0
