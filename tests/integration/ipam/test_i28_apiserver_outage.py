"""I28 — the API server unavailable.

On a control plane of this module's own, because the test stops its API
server: `control_plane` is overridden here, so `kube`, `track`, `start_ipam` … all use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Transient
from tests.integration.ipam.conftest import StartIpam
from tests.integration.ipam.harness import IpamProcess
from tests.integration.ipam.test_i01_i10_allocation import gets, name_of
from tests.integration.ipam.test_i26_leader_and_access import FAST_ELECTION
from tests.support import crds
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane, restart_apiserver, stop_apiserver
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)
OUTAGE = 15.0
RENEW_DEADLINE = 3.0  # FAST_ELECTION
NODE_PATCHES = ("local_ccm_ipam_node_writes_total", {"code": "200"})


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "ipam-outage") as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="local-ccm-test") as kube:
            crds.install(kube)
        yield plane


def drop_stale_connections(kube: Client) -> None:
    """The test's own client kept TLS connections to the killed API server; a reused one
    fails once (and is discarded), which a create would not retry. Drain them with reads."""
    for _ in range(20):
        try:
            kube.list(r.NAMESPACES, limit=1)
            return
        except Transient:
            continue


def patches_sent(proc: IpamProcess) -> float | None:
    """PATCHes of Nodes the controller attempted, or None once its server is gone."""
    try:
        return proc.metric(*NODE_PATCHES)
    except (OSError, AssertionError):
        return None


def test_i28_leader_exits_3_and_sends_no_patch_during_an_outage(
    control_plane: ControlPlane,
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    new_node: Callable[..., Obj],
) -> None:
    make_pool("lead", bits=8, ipv4="10.88.0.0/24", sel={"o": "1"})
    proc = start_ipam(*FAST_ELECTION, leader_election=True)
    proc.wait_ready()
    gets(kube, name_of(new_node("before", labels={"o": "1"})), ["10.88.0.0/24"])
    # The Node shows its CIDR as soon as the API server has the PATCH; the controller counts it
    # when the answer is back, a moment later. Take the baseline once that one PATCH is counted.
    before = eventually(
        lambda: proc.metric(*NODE_PATCHES), timeout=10, message="the first PATCH counted"
    )
    command = stop_apiserver(control_plane)
    stopped = time.monotonic()
    samples: list[float | None] = []
    try:
        while proc.child.exited() is None and time.monotonic() - stopped < OUTAGE:
            samples.append(patches_sent(proc))
            time.sleep(0.2)
        exited_after = time.monotonic() - stopped
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - stopped)))
    finally:
        restart_apiserver(control_plane, command)
        drop_stale_connections(kube)
    assert proc.child.exited() == 3, proc.log()
    assert exited_after <= RENEW_DEADLINE + 2.0, f"exited {exited_after:.1f}s after the stop"
    assert {s for s in samples if s is not None} <= {before}, "a PATCH during the outage"


def test_i28_without_leader_election_stays_up_not_ready_then_allocates(
    control_plane: ControlPlane,
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    new_node: Callable[..., Obj],
) -> None:
    make_pool("single", bits=8, ipv4="10.89.0.0/24", sel={"o": "2"})
    proc = start_ipam()
    proc.wait_ready()
    command = stop_apiserver(control_plane)
    stopped = time.monotonic()
    readyz: list[tuple[float, int]] = []
    try:
        while time.monotonic() - stopped < OUTAGE:
            assert proc.child.exited() is None, proc.log()
            readyz.append((time.monotonic() - stopped, proc.get("/readyz")[0]))
            time.sleep(0.5)
    finally:
        restart_apiserver(control_plane, command)
        drop_stale_connections(kube)
    # One status tick (1 s) observes the broken watches; from then on 503 until the end.
    late = [code for elapsed, code in readyz if elapsed >= 2.0]
    assert late, readyz
    assert set(late) == {503}, readyz
    proc.wait_ready(timeout=60)  # the watches back off while the server is away
    gets(kube, name_of(new_node("after", labels={"o": "2"})), ["10.89.0.0/24"])
