"""Leader election between replicas on the real apiserver.

Each replica is a LeaderElector with its own client, event loop and thread, on the real
clock with the short test durations (lease 4 s, renew deadline 3 s, retry 0.5 s).
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from local_ccm.clock import SystemClock
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Conflict, Transient
from local_ccm.kube.resources import LEASES
from local_ccm.lease.election import ElectionConfig
from local_ccm.lease.elector import KubeLeaseApi, LeaderContext, LeaderElector
from tests.support.controlplane import ControlPlane
from tests.support.waiting import eventually

LEASE, DEADLINE, RETRY = 4.0, 3.0, 0.5
CANDIDATE_WAIT = RETRY * 2.2  # a candidate's longest wait: retry period + 1.2 × jitter
SLACK = 1.0  # request latency and thread scheduling on a busy 2-core machine
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class SeverableLeaseApi:
    """Wraps the real adapter; `sever()` makes every later call fail, like a SIGKILL."""

    def __init__(self, inner: KubeLeaseApi) -> None:
        self.inner = inner
        self.severed = False

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def namespace(self) -> str:
        return self.inner.namespace

    def _check(self) -> None:
        if self.severed:
            raise Transient(0, "Killed", "the process was killed", request_sent=False)

    async def get(self) -> Obj:
        self._check()
        return await self.inner.get()

    async def create(self, lease: Mapping[str, Any]) -> Obj:
        self._check()
        return await self.inner.create(lease)

    async def update(self, lease: Mapping[str, Any]) -> Obj:
        self._check()
        return await self.inner.update(lease)


class Leaders:
    """Leadership changes of all replicas, for the 'never two at once' check."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: set[str] = set()
        self.most_at_once = 0


class Replica:
    """One controller replica: an elector in its own thread and event loop."""

    def __init__(
        self, control_plane: ControlPlane, namespace: str, lease: str, name: str, leaders: Leaders
    ) -> None:
        config = ElectionConfig(
            LEASE, DEADLINE, RETRY, identity=f"{name}_{random.getrandbits(64):016x}"
        )
        self.identity = config.identity
        self.leaders = leaders
        self.client = Client.from_kubeconfig(
            control_plane.admin_kubeconfig, field_manager="local-ccm-test"
        )
        kube_api = KubeLeaseApi(
            AsyncClient(self.client), namespace, lease, timeout=config.write_timeout
        )
        self.api = SeverableLeaseApi(kube_api)
        self.elector = LeaderElector(
            self.api, config, SystemClock(), random.Random(), on_leader_change=self._changed
        )
        self.leading_since: float | None = None
        self.outcome: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"replica-{name}", daemon=True)

    def _changed(self, leading: bool) -> None:
        with self.leaders.lock:
            if leading:
                self.leading_since = time.monotonic()
                self.leaders.current.add(self.identity)
            else:
                self.leaders.current.discard(self.identity)
            self.leaders.most_at_once = max(self.leaders.most_at_once, len(self.leaders.current))

    def _main(self) -> None:
        async def run() -> None:
            self._task = asyncio.current_task()
            self._started.set()
            await self.elector.run(self._work)

        try:
            self._loop.run_until_complete(run())
        except BaseException as exc:  # recorded for the test to assert on
            self.outcome = exc
        finally:
            # Requests still running in worker threads (a killed replica's renewal
            # may still land, as after a real SIGKILL) end within their timeout.
            self._loop.run_until_complete(self._loop.shutdown_default_executor())

    async def _work(self, context: LeaderContext) -> None:
        await asyncio.Event().wait()

    def start(self) -> Replica:
        self._thread.start()
        self._started.wait(10)
        return self

    @property
    def leading(self) -> bool:
        return self.elector.is_leader

    def kill(self) -> None:
        """Stop dead without releasing the lease, as SIGKILL would."""
        self.api.severed = True
        task = self._task
        if task is not None:
            self._loop.call_soon_threadsafe(task.cancel)
        self._join()

    def stop(self) -> None:
        """Graceful stop (SIGTERM): the lease is released."""
        self._loop.call_soon_threadsafe(self.elector.stop)
        self._join()

    def _join(self) -> None:
        self._thread.join(15)
        assert not self._thread.is_alive(), f"replica {self.identity} did not stop"

    def close(self) -> None:
        if self._thread.is_alive():
            self.kill()
        self._loop.close()
        self.client.close()


@pytest.fixture
def replicas(
    control_plane: ControlPlane, test_namespace: str, unique_name: str
) -> Iterator[Callable[[str], Replica]]:
    leaders = Leaders()
    started: list[Replica] = []

    def start(name: str) -> Replica:
        replica = Replica(control_plane, test_namespace, unique_name, name, leaders)
        started.append(replica.start())
        return replica

    yield start
    for replica in started:
        replica.close()
    assert leaders.most_at_once <= 1, "two replicas led at the same time"


def lease_spec(kube: Client, namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.get(LEASES, name, namespace=namespace)["spec"])


def renewed_since(
    kube: Client, namespace: str, name: str, previous: str
) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        spec = lease_spec(kube, namespace, name)
        return spec if spec["renewTime"] != previous else None

    return check


def one_leader(*candidates: Replica) -> Replica:
    def single() -> Replica | None:
        leading = [r for r in candidates if r.leading]
        return leading[0] if len(leading) == 1 else None

    return eventually(single, timeout=LEASE + CANDIDATE_WAIT + SLACK, message="one leader")


def test_exactly_one_of_two_replicas_leads_and_renews(
    replicas: Callable[[str], Replica], kube: Client, test_namespace: str, unique_name: str
) -> None:
    a, b = replicas("replica-a"), replicas("replica-b")
    leader = one_leader(a, b)
    standby = b if leader is a else a
    seen = lease_spec(kube, test_namespace, unique_name)
    for _ in range(3):  # three renewals, with the standby standing by throughout
        previous = seen["renewTime"]
        seen = eventually(
            renewed_since(kube, test_namespace, unique_name, previous),
            timeout=RETRY + SLACK,
            message="the leader renews every retry period",
        )
        assert seen["holderIdentity"] == leader.identity, seen
        assert not standby.leading
    assert seen["leaseDurationSeconds"] == 4, seen
    assert seen["leaseTransitions"] == 0, seen
    assert MICRO_TIME.fullmatch(seen["renewTime"]), seen
    assert MICRO_TIME.fullmatch(seen["acquireTime"]), seen


def test_standby_takes_over_a_lease_duration_after_the_leader_is_killed(
    replicas: Callable[[str], Replica], kube: Client, test_namespace: str, unique_name: str
) -> None:
    a, b = replicas("replica-a"), replicas("replica-b")
    leader = one_leader(a, b)
    standby = b if leader is a else a
    killed_at = time.monotonic()
    leader.kill()
    assert isinstance(leader.outcome, asyncio.CancelledError), leader.outcome
    assert lease_spec(kube, test_namespace, unique_name)["holderIdentity"] == leader.identity

    # Latest takeover: the standby may see the last renewal up to one candidate wait after
    # the kill, then waits one lease duration on its own clock, then up to one more wait.
    latest = LEASE + 2 * CANDIDATE_WAIT + SLACK
    eventually(lambda: standby.leading, timeout=latest + SLACK, message="standby takes over")
    assert standby.leading_since is not None
    took = standby.leading_since - killed_at
    # Earliest: the last renewal was at most one retry period before the kill.
    assert LEASE - RETRY - SLACK / 2 <= took <= latest, took
    spec = lease_spec(kube, test_namespace, unique_name)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == (standby.identity, 1), spec


def test_graceful_stop_hands_over_within_one_retry_period(
    replicas: Callable[[str], Replica], kube: Client, test_namespace: str, unique_name: str
) -> None:
    a, b = replicas("replica-a"), replicas("replica-b")
    leader = one_leader(a, b)
    standby = b if leader is a else a
    stopped_at = time.monotonic()
    leader.stop()
    assert leader.outcome is None, leader.outcome
    eventually(lambda: standby.leading, timeout=CANDIDATE_WAIT + 2 * SLACK)
    assert standby.leading_since is not None
    took = standby.leading_since - stopped_at
    assert took <= CANDIDATE_WAIT + SLACK, took
    assert lease_spec(kube, test_namespace, unique_name)["holderIdentity"] == standby.identity


def test_graceful_stop_writes_the_release_record(
    replicas: Callable[[str], Replica], kube: Client, test_namespace: str, unique_name: str
) -> None:
    only = replicas("replica-a")
    one_leader(only)
    only.stop()
    spec = lease_spec(kube, test_namespace, unique_name)
    assert spec["holderIdentity"] in ("", None), spec  # the server may drop the empty string
    assert spec["leaseDurationSeconds"] == 1, spec
    assert spec["acquireTime"] == spec["renewTime"], spec
    assert spec["leaseTransitions"] == 0, spec


def test_a_stale_resource_version_lease_update_gets_conflict(
    replicas: Callable[[str], Replica], kube: Client, test_namespace: str, unique_name: str
) -> None:
    leader = one_leader(replicas("replica-a"))
    stale = kube.get(LEASES, unique_name, namespace=test_namespace)
    eventually(
        lambda: (
            lease_spec(kube, test_namespace, unique_name)["renewTime"] != stale["spec"]["renewTime"]
        ),
        timeout=RETRY + SLACK,
        message="a renewal moves the resourceVersion",
    )
    deposed = {**stale, "spec": {**stale["spec"], "holderIdentity": "deposed_0000000000000000"}}
    with pytest.raises(Conflict):
        kube.update(LEASES, deposed, namespace=test_namespace)
    assert leader.leading
    assert lease_spec(kube, test_namespace, unique_name)["holderIdentity"] == leader.identity
