"""The LeaderElector loop on a FakeClock and FakeLeaseApi: no wall-clock sleeps."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import pytest

from local_ccm.kube.errors import Conflict, Transient
from local_ccm.lease.election import ElectionConfig, format_micro_time
from local_ccm.lease.elector import (
    RELEASE_TIMEOUT,
    LeaderContext,
    LeaderElector,
    LeadershipLost,
    wait_until_free,
)
from tests.fakes.clock import START_WALL, FakeClock, settle
from tests.fakes.lease import FakeLeaseApi, FakeLeaseServer

LEASE, DEADLINE, RETRY = 4.0, 3.0, 0.5
MAX_CANDIDATE_WAIT = RETRY * 2.2
NAME, NAMESPACE = "t-lease", "t-ns"
OTHER = "node-x_00000000000000ff"


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


class Leaders:
    """Who leads right now, as told by the `on_leader_change` hooks."""

    def __init__(self) -> None:
        self.current: set[str] = set()
        self.most_at_once = 0

    def hook(self, identity: str) -> Callable[[bool], None]:
        def changed(leading: bool) -> None:
            if leading:
                self.current.add(identity)
            else:
                self.current.discard(identity)
            self.most_at_once = max(self.most_at_once, len(self.current))

        return changed


class Candidate:
    """One elector whose work waits forever and records what happened to it."""

    def __init__(
        self,
        server: FakeLeaseServer,
        clock: FakeClock,
        identity: str,
        *,
        seed: int = 0,
        leaders: Leaders | None = None,
    ) -> None:
        self.identity = identity
        self.clock = clock
        self.api = FakeLeaseApi(server, name=NAME, namespace=NAMESPACE, clock=clock)
        self.leaders = leaders or Leaders()
        config = ElectionConfig(LEASE, DEADLINE, RETRY, identity=identity)
        self.elector = LeaderElector(
            self.api, config, clock, random.Random(seed), on_leader_change=self._changed
        )
        self.gauge: list[bool] = []
        self.context: LeaderContext | None = None
        self.work_cancelled = False
        self.task: asyncio.Task[None] | None = None

    def _changed(self, leading: bool) -> None:
        self.gauge.append(leading)
        self.leaders.hook(self.identity)(leading)

    async def work(self, context: LeaderContext) -> None:
        self.context = context
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.work_cancelled = True
            raise

    def start(
        self, work: Callable[[LeaderContext], Coroutine[Any, Any, None]] | None = None
    ) -> None:
        self.task = asyncio.create_task(self.elector.run(work or self.work))

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    def updates_at(self) -> list[float]:
        return [call.at for call in self.api.calls if call.verb == "update" and call.at is not None]


async def leading(candidate: Candidate) -> float:
    """Advance fake time until `candidate` leads; the seconds it took."""
    return await candidate.clock.run_until(lambda: candidate.elector.is_leader, timeout=60)


def spec(server: FakeLeaseServer) -> dict[str, Any]:
    return server.spec(NAMESPACE, NAME)


def held_by_other(server: FakeLeaseServer, clock: FakeClock, **overrides: Any) -> None:
    server.put(
        NAMESPACE,
        NAME,
        {
            "holderIdentity": OTHER,
            "leaseDurationSeconds": int(LEASE),
            "acquireTime": format_micro_time(clock.now()),
            "renewTime": format_micro_time(clock.now()),
            "leaseTransitions": 5,
            **overrides,
        },
    )


# ------------------------------------------------------------------ acquiring


def test_single_candidate_creates_the_lease_and_leads() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        assert c.elector.is_leader
        assert c.api.verbs() == ["get", "create"]
        stamp = format_micro_time(START_WALL)
        assert spec(server) == {
            "holderIdentity": "node-a_1",
            "leaseDurationSeconds": 4,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
        assert c.context is not None
        assert c.context.identity == "node-a_1"
        assert c.context.may_write()
        assert c.gauge == [True]

    run(scenario)


def test_exactly_one_leader_among_several_candidates() -> None:
    async def scenario() -> None:
        clock, server, leaders = FakeClock(), FakeLeaseServer(), Leaders()
        candidates = [
            Candidate(server, clock, f"node-{i}_1", seed=i, leaders=leaders) for i in range(4)
        ]
        for c in candidates:
            c.start()
        await clock.advance(60)
        assert leaders.most_at_once == 1
        leader = [c for c in candidates if c.elector.is_leader]
        assert len(leader) == 1
        assert spec(server)["holderIdentity"] == leader[0].identity
        assert all(c.gauge == [] for c in candidates if c is not leader[0])

    run(scenario)


def test_simultaneous_creates_leave_one_leader_and_one_conflict() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        a, b = Candidate(server, clock, "node-a_1"), Candidate(server, clock, "node-b_1")
        a.start()
        b.start()
        await settle()
        # Both saw NotFound and both created; the apiserver accepts only one.
        assert a.api.verbs() == b.api.verbs() == ["get", "create"]
        assert [a.elector.is_leader, b.elector.is_leader].count(True) == 1

    run(scenario)


def test_update_conflict_leaves_the_candidate_standing_by() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock)
        c = Candidate(server, clock, "node-a_1")
        c.api.fail_next("update", Conflict(409, "Conflict", "the object has been modified"))
        c.start()
        await clock.run_until(lambda: "update" in c.api.verbs(), timeout=10)
        assert not c.elector.is_leader
        assert spec(server)["holderIdentity"] == OTHER
        assert await leading(c) <= MAX_CANDIDATE_WAIT

    run(scenario)


@pytest.mark.parametrize(
    "remote_renew",
    [timedelta(days=-365), timedelta(days=365), timedelta(0)],
    ids=["renewTime-far-past", "renewTime-far-future", "renewTime-now"],
)
def test_takeover_waits_one_lease_duration_on_the_local_monotonic_clock(
    remote_renew: timedelta,
) -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock, renewTime=format_micro_time(clock.now() + remote_renew))
        c = Candidate(server, clock, "node-a_1")
        c.start()
        took = await leading(c)
        assert LEASE <= took <= LEASE + MAX_CANDIDATE_WAIT
        assert spec(server)["leaseTransitions"] == 6

    run(scenario)


def test_a_wall_clock_jump_does_not_shorten_the_wait() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock)
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await clock.advance(1)
        clock.set_wall(clock.now() + timedelta(hours=1))
        await clock.advance(2.5)
        assert not c.elector.is_leader
        assert spec(server)["holderIdentity"] == OTHER

    run(scenario)


def test_no_takeover_while_the_holder_keeps_renewing() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        held_by_other(server, clock)
        c.start()
        for _ in range(30):
            await clock.advance(1)
            held_by_other(server, clock)
        assert not c.elector.is_leader
        assert await leading(c) <= LEASE + MAX_CANDIDATE_WAIT

    run(scenario)


def test_candidate_attempts_are_jittered_by_up_to_1_2_retry_periods() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock, leaseDurationSeconds=3600)
        c = Candidate(server, clock, "node-a_1", seed=3)
        c.start()
        await clock.advance(60)
        gets = [call.at for call in c.api.calls if call.at is not None]
        gaps = [later - earlier for earlier, later in itertools.pairwise(gets)]
        assert len(gaps) > 30
        assert all(RETRY <= gap < MAX_CANDIDATE_WAIT for gap in gaps), gaps
        assert max(gaps) - min(gaps) > RETRY / 2, "the waits are not jittered"

    run(scenario)


def test_candidate_keeps_trying_through_an_api_outage() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.api.outage = True
        c.start()
        await clock.advance(10)
        assert not c.elector.is_leader
        assert len(c.api.calls) > 5
        c.api.outage = False
        assert await leading(c) <= MAX_CANDIDATE_WAIT

    run(scenario)


# ------------------------------------------------------------------ leading


def test_leader_renews_every_retry_period() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await clock.advance(10)
        updates = c.updates_at()
        assert len(updates) == 20
        assert all(b - a == pytest.approx(RETRY) for a, b in itertools.pairwise(updates))
        assert spec(server)["renewTime"] == format_micro_time(clock.now())
        assert spec(server)["acquireTime"] == format_micro_time(START_WALL)
        assert spec(server)["leaseTransitions"] == 0

    run(scenario)


def test_the_leader_renews_from_its_own_write_and_reads_only_after_a_conflict() -> None:
    """One request per renewal (an UPDATE from the last written lease, as client-go); when
    someone else wrote the lease meanwhile (409), the next attempt reads it and decides."""

    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        before = len(c.api.calls)
        await clock.advance(10)
        renewals = [call.verb for call in c.api.calls[before:]]
        assert renewals == ["update"] * 20  # no GET
        c.api.fail_next("update", Conflict(409, "Conflict", "modified"))
        before = len(c.api.calls)
        await clock.advance(RETRY)
        assert [call.verb for call in c.api.calls[before:]] == ["update", "get", "update"]
        assert c.elector.is_leader

    run(scenario)


def test_a_failed_renewal_is_retried_within_the_deadline() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        c.api.fail_next("update", Conflict(409, "Conflict", "modified"))
        c.api.fail_next("update", Transient(503, "ServiceUnavailable", "busy"))
        await clock.advance(5)
        assert c.elector.is_leader
        assert not c.done

    run(scenario)


@pytest.mark.parametrize("failure", ["outage", "hang"])
def test_no_renewal_for_the_renew_deadline_loses_leadership(failure: str) -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        setattr(c.api, failure, True)
        took = await clock.run_until(lambda: c.done, timeout=30)
        assert took == pytest.approx(DEADLINE)
        assert c.task is not None
        with pytest.raises(LeadershipLost, match="no successful renewal"):
            c.task.result()
        assert c.work_cancelled
        assert c.gauge == [True, False]
        c.api.hang = False

    run(scenario)


def test_writes_are_fenced_before_the_renew_deadline() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        c.api.outage = True
        assert c.context is not None
        await clock.advance(1.9)
        assert c.context.may_write()
        await clock.advance(0.2)
        assert not c.context.may_write()
        assert c.elector.is_leader, "fencing starts before leadership is given up"

    run(scenario)


def test_seeing_another_holder_while_leading_is_an_immediate_loss() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        held_by_other(server, clock)
        took = await clock.run_until(lambda: c.done, timeout=30)
        assert took == pytest.approx(RETRY)
        assert c.task is not None
        with pytest.raises(LeadershipLost, match=OTHER):
            c.task.result()
        assert c.work_cancelled
        assert spec(server)["holderIdentity"] == OTHER, "a deposed leader must not release"

    run(scenario)


# ------------------------------------------------------------------ stopping


def test_graceful_stop_releases_the_lease_as_documented() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock, leaseTransitions=7, leaseDurationSeconds=1)
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await leading(c)
        await clock.advance(3)
        c.elector.stop()
        await settle()
        assert c.done
        assert c.task is not None
        assert c.task.result() is None
        assert c.work_cancelled
        stamp = format_micro_time(clock.now())
        assert spec(server) == {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 8,
        }

    run(scenario)


def test_standby_takes_over_within_one_retry_period_after_a_release() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        a, b = Candidate(server, clock, "node-a_1"), Candidate(server, clock, "node-b_1", seed=1)
        a.start()
        await settle()
        b.start()
        await clock.advance(10)
        a.elector.stop()
        assert await leading(b) <= MAX_CANDIDATE_WAIT
        assert spec(server)["leaseTransitions"] == 1

    run(scenario)


def test_cancelling_run_releases_and_propagates_the_cancellation() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        assert c.task is not None
        c.task.cancel()
        await settle()
        assert c.task.cancelled()
        assert c.work_cancelled
        assert spec(server)["holderIdentity"] == ""

    run(scenario)


def test_stop_while_standing_by_returns_without_writing() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock)
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await clock.advance(2)
        c.elector.stop()
        await settle()
        assert c.done
        assert set(c.api.verbs()) == {"get"}

    run(scenario)


def test_stop_while_a_lease_request_hangs_returns_at_once() -> None:
    """A candidate whose Lease GET never answers (an API server hung at start-up) stops as soon
    as it is told to, without waiting for the attempt's renew deadline."""

    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock)
        started = clock.monotonic()
        c = Candidate(server, clock, "node-a_1")
        c.api.hang = True
        c.start()
        await settle()
        assert c.api.verbs() == ["get"]
        c.elector.stop()
        await settle()
        assert c.done
        assert c.api.verbs() == ["get"]  # nothing written, no second attempt
        assert clock.monotonic() == started  # no time passed: the stop did not wait it out

    run(scenario)


def test_a_release_the_api_server_never_answers_ends_within_the_release_timeout() -> None:
    """A leader told to stop while the API server hangs (its first list, say) gives up the
    hand-over after RELEASE_TIMEOUT, not after the write timeout (5 s with the defaults):
    the standby then takes over when the Lease expires."""

    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        api = FakeLeaseApi(server, name=NAME, namespace=NAMESPACE, clock=clock)
        config = ElectionConfig(15.0, 10.0, 2.0, identity="node-a_1")  # write timeout 5 s
        elector = LeaderElector(api, config, clock, random.Random(0))

        async def work(context: LeaderContext) -> None:
            await asyncio.Event().wait()

        task = asyncio.create_task(elector.run(work))
        await clock.run_until(lambda: elector.is_leader, timeout=60)
        api.hang = True
        elector.stop()
        took = await clock.run_until(task.done, timeout=60)
        assert took <= RELEASE_TIMEOUT < config.write_timeout
        assert spec(server)["holderIdentity"] == "node-a_1"  # not released: it expires

    run(scenario)


def test_work_that_returns_releases_the_lease() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")

        async def finish(context: LeaderContext) -> None:
            await clock.sleep(1)

        c.start(finish)
        await clock.advance(1)
        assert c.done
        assert spec(server)["holderIdentity"] == ""

    run(scenario)


def test_work_that_fails_releases_the_lease_and_propagates_the_error() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")

        async def crash(context: LeaderContext) -> None:
            raise RuntimeError("boom")

        c.start(crash)
        await settle()
        assert c.task is not None
        with pytest.raises(RuntimeError, match="boom"):
            c.task.result()
        assert spec(server)["holderIdentity"] == ""

    run(scenario)


def test_release_after_a_renewal_that_landed_late_still_releases() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await settle()
        # Our own write landed but its answer was lost: the resourceVersion moved.
        server.put(NAMESPACE, NAME, spec(server))
        c.elector.stop()
        await settle()
        assert spec(server)["holderIdentity"] == ""

    run(scenario)


# ------------------------------------------------------------------ fields


def test_other_lease_fields_are_preserved_through_acquire_renew_and_release() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(
            server,
            clock,
            holderIdentity="",
            strategy="OldestEmulationVersion",
            preferredHolder="node-c_1",
        )
        server.leases[(NAMESPACE, NAME)]["metadata"]["labels"] = {"team": "infra"}
        c = Candidate(server, clock, "node-a_1")
        c.start()
        await clock.advance(2)
        assert spec(server)["holderIdentity"] == "node-a_1"
        c.elector.stop()
        await settle()
        lease = server.leases[(NAMESPACE, NAME)]
        assert lease["spec"]["strategy"] == "OldestEmulationVersion"
        assert lease["spec"]["preferredHolder"] == "node-c_1"
        assert lease["metadata"]["labels"] == {"team": "infra"}

    run(scenario)


def test_leader_transitions_are_counted() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        a, b = Candidate(server, clock, "node-a_1"), Candidate(server, clock, "node-b_1", seed=1)
        a.start()
        await settle()
        b.start()
        a.elector.stop()
        await leading(b)
        assert spec(server)["leaseTransitions"] == 1
        again = Candidate(server, clock, "node-a_2", seed=2)
        again.start()
        b.elector.stop()
        await leading(again)
        assert spec(server)["leaseTransitions"] == 2
        assert a.gauge == b.gauge == [True, False]

    run(scenario)


# ------------------------------------------------------------ waiting for a Lease it never holds


class Waiter:
    """`wait_until_free` on the test Lease, as the manager runs it before a controller whose
    standalone binary holds that Lease."""

    def __init__(self, server: FakeLeaseServer, clock: FakeClock, identity: str = "manager_1"):
        self.api = FakeLeaseApi(server, name=NAME, namespace=NAMESPACE, clock=clock)
        self.told: list[bool] = []  # what `on_wait` was told, in order
        self.task = asyncio.create_task(
            wait_until_free(self.api, identity, clock, RETRY, self.told.append)
        )

    def writes(self) -> list[str]:
        return [call.verb for call in self.api.calls if call.verb != "get"]


def test_an_absent_lease_is_free_at_once_and_only_read() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        waiter = Waiter(server, clock)
        await settle()
        assert waiter.task.done()
        assert [call.verb for call in waiter.api.calls] == ["get"]
        assert waiter.told == []  # never waited

    run(scenario)


def test_a_lease_renewed_by_its_holder_is_waited_for_until_released() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock)
        waiter = Waiter(server, clock)
        for _ in range(20):  # the old standalone Pod renews every second for 20 s
            await clock.advance(1.0)
            held_by_other(server, clock)
        assert not waiter.task.done()
        assert waiter.told == [True]  # the metric says so for as long as it waits
        held_by_other(server, clock, holderIdentity="", leaseDurationSeconds=1)  # SIGTERM
        took = await clock.run_until(waiter.task.done, timeout=10)
        assert took <= RETRY
        assert waiter.writes() == []  # never takes the Lease: it only waits for it
        assert waiter.told == [True, False]

    run(scenario)


def test_a_lease_its_holder_stopped_renewing_is_free_after_its_duration() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock, leaseDurationSeconds=6)  # a Pod that vanished
        waiter = Waiter(server, clock)
        took = await clock.run_until(waiter.task.done, timeout=30)
        assert 6 <= took <= 6 + RETRY  # its duration on the local clock, from the first read
        assert waiter.writes() == []

    run(scenario)


def test_a_failed_read_is_not_free() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        waiter = Waiter(server, clock)
        waiter.api.outage = True
        await settle()
        # The first read already failed (unknown), so it does not start, read after read.
        await clock.advance(10)
        assert not waiter.task.done()
        assert len(waiter.api.calls) >= 10
        assert waiter.told == [True]  # held back: the metric says so, as for a held Lease
        waiter.api.outage = False  # the answer: NotFound
        assert await clock.run_until(waiter.task.done, timeout=10) <= RETRY
        assert waiter.told == [True, False]

    run(scenario)


def test_a_lease_held_by_this_process_is_free() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock, holderIdentity="manager_1")
        waiter = Waiter(server, clock, identity="manager_1")
        await settle()
        assert waiter.task.done()

    run(scenario)


def test_a_wait_cut_short_says_it_no_longer_waits() -> None:
    async def scenario() -> None:
        clock, server = FakeClock(), FakeLeaseServer()
        held_by_other(server, clock)
        waiter = Waiter(server, clock)
        await clock.advance(1.0)
        assert waiter.told == [True]
        waiter.task.cancel()  # this process lost its own Lease, or stops
        await asyncio.wait({waiter.task})
        assert waiter.told == [True, False]

    run(scenario)
