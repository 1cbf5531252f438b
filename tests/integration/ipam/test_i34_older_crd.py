"""I34 — objects stored under upstream's CRD, then ours applied over it in place (CRD
validation ratcheting lets the old objects stay).

On a control plane of this module's own, because the CRD is replaced:
`control_plane` is overridden here, so `kube`, `track`, `start_ipam` … all use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.ipam.conftest import EVENT_NAMESPACE, FIXTURE_U_FLAGS, StartIpam
from tests.integration.ipam.objects import FINALIZER, condition, event_reasons
from tests.integration.ipam.test_i01_i10_allocation import delete_and_wait, gets, name_of
from tests.support import crds
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)
UPSTREAM_CRD = Path(__file__).with_name("upstream_clustercidrs_crd.yaml")


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "ipam-older-crd") as plane:
        yield plane


def test_i34_objects_from_an_older_crd(
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    new_node: Callable[..., Obj],
) -> None:
    (upstream,) = crds.load_crds(UPSTREAM_CRD)
    crds.apply_crd(kube, upstream)
    crds.wait_established(kube, upstream)
    zero = name_of(make_pool("zero-cap", bits=10, ipv4="10.0.0.0/24", sel={"z": "1"}))
    edited = name_of(make_pool("edited", bits=8, ipv4="10.84.0.0/23", sel={"z": "1"}))
    # Upstream's per-field rules run only when the field exists on both sides: adding ipv6
    # slips through and bumps the generation.
    changed = kube.patch(
        r.CLUSTER_CIDRS, edited, {"spec": {"ipv6": "fd00:84::/119"}}, patch_type="merge"
    )
    assert changed["metadata"]["generation"] == 2
    crds.install(kube)  # ours, in place over upstream's
    assert {kube.get(r.CLUSTER_CIDRS, n)["metadata"]["name"] for n in (zero, edited)} == {
        zero, edited,
    }  # fmt: skip

    start_ipam(*FIXTURE_U_FLAGS).wait_ready()

    def ready_reason(name: str) -> tuple[str, str] | None:
        return condition(kube.get(r.CLUSTER_CIDRS, name), "Ready")

    eventually(lambda: ready_reason(zero) == ("False", "Invalid"), timeout=10,
               message=f"{zero} Ready=False/Invalid")  # fmt: skip
    eventually(lambda: ready_reason(edited) == ("False", "SpecChanged"), timeout=10,
               message=f"{edited} Ready=False/SpecChanged")  # fmt: skip
    eventually(
        lambda: "InvalidClusterCIDR" in event_reasons(kube, EVENT_NAMESPACE, "ClusterCIDR", zero),
        timeout=10, message="InvalidClusterCIDR Event",
    )  # fmt: skip
    assert FINALIZER not in (kube.get(r.CLUSTER_CIDRS, zero)["metadata"].get("finalizers") or [])
    gets(kube, name_of(new_node("z", labels={"z": "1"})), ["10.96.0.0/24", "fd00:10:96::/120"])
    delete_and_wait(kube, r.CLUSTER_CIDRS, zero, timeout=5.0)  # no finalizer: at once
