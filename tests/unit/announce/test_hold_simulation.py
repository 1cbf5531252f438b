"""Never two Nodes answering for one address: agents, clocks, a network and the API server's
compare-and-swap simulated in the test, pure and in simulated time.

Each agent runs `hold.decide` on what it reads and writes what it decides through a fake Lease
store that accepts a create only when there is no Lease and an update only at the version it
was based on (as resourceVersion does). Around them: clocks with their own offsets and rates,
reads that lag, requests that take long enough to land after the writer gave up on them,
partitions, crashes with restarts, and eligibility that comes and goes in each agent's own
(stale) view. At every step at most one live agent may be answering (`hold.answering`); once
the faults stop, one agent must answer again.

The exhaustive grid crosses which agent is cut off, when and for how long with how slow a
write; the random runs mix everything. Deleting a held Lease by hand is left out on purpose:
docs/l2-announcement.md says what that costs.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import itertools
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from local_ccm.announce.core import choice, hold
from local_ccm.announce.core.hold import Acquire, HoldState, Timings, Write
from local_ccm.lease.election import LeaseRecord

T = Timings()
ADDRESS = ipaddress.ip_address("192.0.2.10")
DT = 0.1  # a tick of real time; every agent reads and decides once a tick
WRITE_TIMEOUT = 2.0  # leader election's write timeout at these timings
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

Window = tuple[float, float]


def inside(windows: list[Window], t: float) -> bool:
    return any(start <= t < end for start, end in windows)


@dataclass
class Store:
    """The Lease as the API server keeps it: a record and a version, with its history so
    that a lagging reader can be shown the past."""

    record: LeaseRecord | None = None
    version: int = 0
    history: list[tuple[float, LeaseRecord | None, int]] = field(default_factory=list)

    def read(self, at: float) -> tuple[LeaseRecord | None, int]:
        index = bisect.bisect_right(self.history, at, key=lambda entry: entry[0])
        return self.history[index - 1][1:] if index else (None, 0)

    def write(self, write: Write, based_on: int, now: float) -> int | None:
        """The new version, or None for a conflict (AlreadyExists or a stale resourceVersion)."""
        if isinstance(write, Acquire) and write.create:
            if self.record is not None:
                return None
        elif self.record is None or self.version != based_on:
            return None
        self.record, self.version = write.record, self.version + 1
        self.history.append((now, self.record, self.version))
        return self.version


@dataclass
class Request:
    write: Write
    based_on: int
    sent_at: float  # the agent's monotonic clock
    lands: float  # real time it reaches the store (never, if sent while cut off)
    answered: float  # real time the answer is back (lost if cut off then)
    result: int | None = None
    landed: bool = False


@dataclass
class Agent:
    name: str
    offset: float  # monotonic = offset + rate × real time
    rate: float
    lag: float  # how old its reads are
    write_delay: float  # until a write lands; its answer takes half as long again
    late: bool = False  # whether what it sends while cut off lands when the cut ends
    cut_off: list[Window] = field(default_factory=list)
    down: list[Window] = field(default_factory=list)
    ineligible: list[Window] = field(default_factory=list)
    state: HoldState = field(default_factory=HoldState)
    version: int = 0  # of the newest record it read or wrote
    request: Request | None = None
    orphans: list[Request] = field(default_factory=list)  # sent before a crash, still landing
    wake: float | None = None  # the last WaitUntil: decide again then, or on a new input
    last: tuple[int, int | None] | None = None  # the input of the last decision
    up: bool = True

    def mono(self, t: float) -> float:
        return self.offset + self.rate * t


def step_requests(agent: Agent, store: Store, t: float, alive: bool) -> None:
    for request in [agent.request, *agent.orphans]:
        if request is not None and not request.landed and t >= request.lands:
            request.landed = True
            request.result = store.write(request.write, request.based_on, t)
    request = agent.request
    if request is None or not alive:
        return
    if t >= request.answered and request.landed and not inside(agent.cut_off, t):
        if request.result is not None:
            agent.state = hold.written(agent.state, request.write, request.sent_at, T)
            agent.version = request.result
        agent.request = agent.last = None
    elif agent.mono(t) - request.sent_at >= WRITE_TIMEOUT:
        agent.orphans.append(request)  # given up on; it may still land
        agent.request = agent.last = None


@functools.cache
def place(eligible: frozenset[str], me: str, holder: str) -> int | None:
    return choice.place(ADDRESS, eligible, me, holder)


def step_decision(agent: Agent, agents: list[Agent], store: Store, t: float) -> None:
    if agent.request is not None or inside(agent.cut_off, t):
        return
    record, version = store.read(t - agent.lag)
    if version < agent.version:
        return  # older than its own last write: the adapter keeps the newest
    agent.version = version
    view = t - agent.lag
    eligible = frozenset(a.name for a in agents if not inside(a.ineligible, view))
    holder = record.holder_identity if record is not None else ""
    rank = place(eligible, agent.name, holder)
    due = agent.wake is not None and agent.mono(t) >= agent.wake
    if agent.last == (version, rank) and not due:
        return  # as the loop: nothing new read and no wake-up due
    agent.last = (version, rank)
    wall = EPOCH + timedelta(seconds=t + 30 * agent.rate)  # wall clocks disagree too
    decision = hold.decide(
        agent.state, record, me=agent.name, rank=rank, now=agent.mono(t), wall=wall, timings=T
    )
    agent.state = decision.state
    if isinstance(decision.step, hold.WaitUntil):
        agent.wake = decision.step.at
        return
    agent.wake = None
    lands = t + agent.write_delay
    answered = lands + agent.write_delay / 2
    cut = [(start, end) for start, end in agent.cut_off if start <= t + 0.001 < end]
    if cut:  # sent into a partition: lost, or stuck until it heals and long given up on
        lands = cut[0][1] + 0.05 if agent.late else float("inf")
        answered = float("inf")
    agent.request = Request(decision.step, version, agent.mono(t), lands, answered)


def run(agents: list[Agent], until: float) -> list[str]:
    """Simulate; the answering agents of every tick, checked as they go."""
    store = Store()
    answering: list[str] = []
    for tick in range(int(until / DT)):
        t = tick * DT
        for agent in agents:
            alive = not inside(agent.down, t)
            if not alive and agent.up:  # crashed: its memory is gone
                agent.state, agent.version, agent.wake, agent.last = HoldState(), 0, None, None
                if agent.request is not None:
                    agent.orphans.append(agent.request)
                agent.request = None
            agent.up = alive
            step_requests(agent, store, t, alive)
            if alive:
                step_decision(agent, agents, store, t)
        answering = [
            a.name for a in agents if not inside(a.down, t) and hold.answering(a.state, a.mono(t))
        ]
        assert len(answering) <= 1, f"two answer at {t:.1f}: {answering}"
    return answering


def trio(rng: random.Random, write_delay: float = 0.05, lag: float = 0.0, late: bool = False
         ) -> list[Agent]:  # fmt: skip
    return [
        Agent(name, offset=rng.uniform(-1e6, 1e6), rate=rng.uniform(0.999, 1.001), lag=lag,
              write_delay=write_delay, late=late)
        for name in ("a", "b", "c")
    ]  # fmt: skip


def holder_at(agents: list[Agent], t: float) -> Agent:
    """Who answers at real time `t` in a fault-free run of these agents."""
    [name] = run(agents, t)
    return next(a for a in agents if a.name == name)


GRID = list(
    itertools.product(
        ["holder", "other"],  # who is cut off
        [5.0, 6.3, 7.1],  # from when (the holder renews every 2 s of its clock)
        [1.0, 3.0, 6.5, 12.0],  # for how long
        [0.05, 1.0],  # write delay (the answer takes half as long again)
        [0.0, 0.7],  # read lag
        [False, True],  # what it sent while cut off: lost, or landing when the cut heals
    )
)


@pytest.mark.parametrize("case", [pytest.param(g, id=str(g)) for g in GRID])
def test_a_partition_never_makes_two_answer(
    case: tuple[str, float, float, float, float, bool],
) -> None:
    victim, start, length, delay, lag, late = case
    agents = trio(random.Random(0), write_delay=delay, lag=lag, late=late)
    first = holder_at(trio(random.Random(0), write_delay=delay, lag=lag), 4.0)
    target = first if victim == "holder" else next(a for a in agents if a.name != first.name)
    for agent in agents:
        if agent.name == target.name:
            agent.cut_off = [(start, start + length)]
    assert len(run(agents, start + length + 15.0)) == 1


@pytest.mark.parametrize("seed", range(80))
def test_random_faults_never_make_two_answer(seed: int) -> None:
    rng = random.Random(seed)
    agents = trio(rng, write_delay=rng.choice([0.05, 0.4, 1.0]), late=rng.random() < 0.5)
    for agent in agents:
        agent.lag = rng.choice([0.0, 0.3, 1.0])
        for windows in (agent.cut_off, agent.down, agent.ineligible):
            for _ in range(rng.randint(0, 2)):
                start = rng.uniform(2.0, 40.0)
                windows.append((start, start + rng.uniform(0.5, 10.0)))
    assert len(run(agents, 70.0)) == 1  # faults end by 50 s: one answers again


def test_a_crashed_holder_is_replaced_within_the_failover_bound() -> None:
    """Lease duration + skew margin after the last renewal the others saw, plus a write and
    the reading ticks: at most D + M + renew period + 1 s after the crash."""
    agents = trio(random.Random(1))
    first = holder_at(trio(random.Random(1)), 10.0)
    next(a for a in agents if a.name == first.name).down = [(10.0, 100.0)]
    bound = 10.0 + T.lease_duration + T.skew_margin + T.renew_period + 1.0
    assert run(agents, bound) not in ([], [first.name])
