"""I33 — no CRD, the flag pool only; the CRD installed later is used without a restart.

On a control plane of this module's own without the CRD: `control_plane` is
overridden here, so `kube`, `track`, `start_ipam` … all use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.ipam.conftest import StartIpam
from tests.integration.ipam.objects import FINALIZER
from tests.integration.ipam.test_i01_i10_allocation import gets, name_of
from tests.support import crds
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.waiting import eventually

# Discovery is re-checked every 60 s: the scenario allows 70 s after the install.
pytestmark = pytest.mark.timeout(180)
CRD_PICKED_UP = 70.0


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "ipam-no-crd") as plane:
        yield plane


def test_i33_flag_pool_without_the_crd_then_the_crd_without_restart(
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    new_node: Callable[..., Obj],
) -> None:
    assert not crds.is_served(kube, "networking.x-k8s.io", "v1", "clustercidrs")
    proc = start_ipam("--cluster-cidr=10.99.0.0/16")
    proc.wait_ready()
    gets(kube, name_of(new_node("flag")), ["10.99.0.0/24"])
    assert proc.get("/readyz")[0] == 200
    installed = time.monotonic()
    crds.install(kube)
    pool = name_of(make_pool("crd", bits=8, ipv4="10.98.0.0/24", sel={"c": "1"}))

    def has_finalizer() -> bool:
        return FINALIZER in (kube.get(r.CLUSTER_CIDRS, pool)["metadata"].get("finalizers") or [])

    # The finalizer shows the controller found the API and the pool is Ready.
    eventually(has_finalizer, timeout=CRD_PICKED_UP, interval=0.5, message="pool picked up")
    gets(kube, name_of(new_node("c", labels={"c": "1"})), ["10.98.0.0/24"])
    assert time.monotonic() - installed <= CRD_PICKED_UP
    assert proc.child.exited() is None
