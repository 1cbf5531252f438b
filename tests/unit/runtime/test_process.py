"""The process runtime's order (local_ccm.runtime.process): the health server first, /readyz
503 with the reason while the permission check waits, exit 2 on a listen address, exit 4 on a
missing permission, a warning only for an optional one, the work after the check."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from local_ccm.kube import errors as ke
from local_ccm.kube.nodes import Access
from local_ccm.lease.elector import LeaderContext
from local_ccm.runtime.process import Process, Status, answer_probes, process_checks, run_process
from local_ccm.runtime.serve import BindError, Checks, Servers
from tests.fakes.clock import FakeClock
from tests.unit.runtime.test_access import FakeReviews

NODES = Access("list", "nodes")
REVIEWS = Access("create", "tokenreviews", "authentication.k8s.io")


class World:
    def __init__(self, reviews: FakeReviews) -> None:
        self.clock, self.stop, self.reviews = FakeClock(), asyncio.Event(), reviews
        self.events: list[str] = []
        self.readyz: Checks | None = None
        self.status = Status()

    def serve(self, healthz: Checks, readyz: Checks) -> Servers:
        self.events.append("serve")
        self.readyz = readyz
        return Servers([], None, None)

    async def work(self, context: LeaderContext | None) -> int | None:
        self.events.append("work")
        await self.stop.wait()
        return None

    def process(self, permissions: Sequence[Access], **kw: object) -> Process:
        return Process(prog="p", clock=self.clock, stop=self.stop, serve=self.serve,
                       reviews=self.reviews, permissions=permissions, work=self.work,
                       status=self.status, **kw)  # type: ignore[arg-type]  # fmt: skip


def failing(readyz: Checks | None) -> list[tuple[str, str]]:
    assert readyz is not None
    return [(name, detail) for name, ok, detail in readyz.run() if not ok]


def test_health_first_then_the_check_then_the_work_until_stopped() -> None:
    errors: list[ke.ApiError] = [ke.Transient(0, "ConnectionError", "refused")]
    world = World(FakeReviews(errors=errors))

    async def scenario() -> int:
        run = asyncio.ensure_future(run_process(world.process([NODES])))
        await world.clock.run_until(lambda: bool(world.events), timeout=5)
        assert failing(world.readyz) == [
            ("start-up", "waiting for the API server: ConnectionError: refused")
        ]
        await world.clock.run_until(lambda: "work" in world.events, timeout=60)
        assert failing(world.readyz) == []
        world.stop.set()
        return await run

    assert asyncio.run(scenario()) == 0
    assert world.events == ["serve", "work"]


def test_a_missing_permission_exits_4_without_working(caplog: pytest.LogCaptureFixture) -> None:
    world = World(FakeReviews(denied={"list nodes"}))
    assert asyncio.run(run_process(world.process([NODES]))) == 4
    assert world.events == ["serve"]
    assert "missing RBAC permissions: list nodes" in caplog.text


def test_a_missing_optional_permission_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    world = World(FakeReviews(denied={str(REVIEWS)}))

    async def scenario() -> int:
        run = asyncio.ensure_future(run_process(world.process([NODES], optional=[REVIEWS])))
        await world.clock.run_until(lambda: "work" in world.events, timeout=5)
        world.stop.set()
        return await run

    assert asyncio.run(scenario()) == 0
    assert "/metrics answers 503 to every scrape" in caplog.text


def test_a_listen_address_that_cannot_be_bound_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    world = World(FakeReviews())

    def serve(healthz: Checks, readyz: Checks) -> Servers:
        raise BindError("--health-probe-bind-address=:1: address already in use")

    world.serve = serve  # type: ignore[method-assign]
    assert asyncio.run(run_process(world.process([NODES]))) == 2
    assert capsys.readouterr().err == "p: --health-probe-bind-address=:1: address already in use\n"
    assert world.reviews.requests == []


def test_a_stop_during_the_check_exits_0() -> None:
    world = World(FakeReviews(errors=[ke.Transient(0, "E", "down")] * 100))

    async def scenario() -> int:
        run = asyncio.ensure_future(run_process(world.process([NODES])))
        await world.clock.run_until(lambda: bool(world.reviews.requests), timeout=5)
        world.stop.set()
        return await run

    assert asyncio.run(scenario()) == 0
    assert "work" not in world.events


def test_liveness_asks_the_loop_and_fails_only_when_it_stays_unanswered() -> None:
    """No periodic tick: a probe schedules an answer on the event loop; a loop that runs
    answers at once, one that never runs fails the check 10 s after the first question."""
    clock = FakeClock()
    status = Status()
    healthz, _ = process_checks(status, clock)

    async def running() -> list[tuple[str, bool, str]]:
        answer_probes(status, clock)
        await clock.advance(60)  # idle for a minute: nothing ticked meanwhile
        status.asked = None
        results = healthz.run()  # the question...
        await asyncio.sleep(0)  # ...is answered as soon as the loop runs
        assert status.asked is None
        assert status.last_tick == clock.monotonic()
        return results

    assert all(ok for _, ok, _ in asyncio.run(running()))

    stuck = asyncio.new_event_loop()  # never run: it cannot answer

    def ask() -> None:
        stuck.call_soon_threadsafe(lambda: None)

    status.ask = ask
    status.asked = None
    assert all(ok for _, ok, _ in healthz.run())  # asked now: not stuck for 10 s yet

    async def later(seconds: float) -> None:
        await clock.advance(seconds)

    asyncio.run(later(9))
    assert all(ok for _, ok, _ in healthz.run())
    asyncio.run(later(1))
    assert [(name, ok) for name, ok, _ in healthz.run() if not ok] == [("loop", False)]
    stuck.close()


def test_check_on_refusal_works_first_and_checks_when_a_request_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The agent's mode: no review before the work; the first 403 runs the check, which
    exits 4 listing what is missing."""
    world = World(FakeReviews(denied={"list nodes"}))
    refused = asyncio.Event()

    async def scenario() -> int:
        run = asyncio.ensure_future(run_process(world.process([NODES], check_on_refusal=refused)))
        await world.clock.run_until(lambda: "work" in world.events, timeout=5)
        assert world.reviews.requests == []  # working, nothing asked
        refused.set()  # a request of the work got 403
        return await run

    assert asyncio.run(scenario()) == 4
    assert world.events == ["serve", "work"]
    assert "missing RBAC permissions: list nodes" in caplog.text


def test_check_on_refusal_with_nothing_missing_lets_the_work_go_on() -> None:
    """A refusal that is not RBAC's (an admission policy): the check finds nothing missing."""
    world = World(FakeReviews())
    refused = asyncio.Event()

    async def scenario() -> int:
        run = asyncio.ensure_future(run_process(world.process([NODES], check_on_refusal=refused)))
        await world.clock.run_until(lambda: "work" in world.events, timeout=5)
        refused.set()
        await world.clock.run_until(lambda: bool(world.reviews.requests), timeout=5)
        await asyncio.sleep(0)
        assert not run.done()  # still working
        world.stop.set()
        return await run

    assert asyncio.run(scenario()) == 0
    assert world.reviews.requests == ["rules default", "access list nodes"]  # checked once
