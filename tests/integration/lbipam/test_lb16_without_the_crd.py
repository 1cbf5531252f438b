"""LB16: started before its CRD is installed (a plane of its own, where nobody installed it),
service-lb-ipam stays up and says why it is not ready (`/readyz` 503 naming the pools' cache);
once the CRD is applied it becomes ready and allocates, without a restart."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support import crds, lb
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.processes import free_port, tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries: Binaries = ensure(["etcd", "kube-apiserver"])
    with dedicated_plane(request.config, binaries, "lbnocrd") as started:
        yield started


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz?verbose", timeout=5) as got:
            return int(got.status), got.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_lb16_waits_for_its_crd_then_works(plane: ControlPlane, test_artifacts: Path) -> None:
    admin = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="lb16")
    namespace = f"lb16-{secrets.token_hex(3)}"
    meta = {"name": namespace, "labels": {"lbtest": namespace}}
    admin.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    health = free_port()
    child = lb.start(plane.admin_kubeconfig, test_artifacts / "lb.log",
                     f"--health-probe-bind-address=127.0.0.1:{health}")  # fmt: skip
    try:

        def waiting_for_pools() -> tuple[int, str] | None:
            answer = readyz(health)  # past its start-up, the controller names what it waits for
            return answer if "caches not synced" in answer[1] else None

        code, text = eventually(waiting_for_pools, timeout=30, message="/readyz names the pools")
        assert code == 503
        assert "pools" in text
        assert child.exited() is None
        crds.install(admin, (crds.POOL_CRD,))
        space = lb.Space(admin, namespace, namespace)
        net = lb.block()
        space.pool([f"{net}.0/29"])
        eventually(lambda: readyz(health)[0] == 200, timeout=60, message="ready with the CRD")
        space.service("web")
        assert lb.allocated(space, "web") == [f"{net}.1"]
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
        admin.close()
