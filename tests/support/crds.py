"""The `crds` session fixture: the chart's CRDs applied for real.

Loaded through `pytest_plugins` in tests/conftest.py (session-scoped, so it costs nothing
until a test asks for `crds`). The
CRD is created (or replaced, when a previous run or test left another version behind), then
the fixture waits for `Established` and for discovery to list the resource, so the first
request of a test never races the apiserver's handler installation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Conflict, NotFound
from tests.support import resources as r
from tests.support.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
CLUSTER_CIDR_CRD = REPO / "charts" / "local-ccm" / "files" / "networking.x-k8s.io_clustercidrs.yaml"
POOL_CRD = REPO / "charts" / "local-ccm" / "files" / "lb.local-ccm.io_loadbalancerippools.yaml"
CRD_FILES = (CLUSTER_CIDR_CRD, POOL_CRD)
ESTABLISH_TIMEOUT = 30.0
FIELD_MANAGER = "local-ccm-test"


def load_crds(path: Path) -> list[Obj]:
    """The CustomResourceDefinition documents of one YAML file."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


def apply_crd(kube: Client, crd: Obj) -> Obj:
    """Create `crd`, or replace the stored one's spec (an in-place upgrade)."""
    try:
        return kube.create(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
    except Conflict:
        pass
    for _ in range(5):
        current = kube.get(r.CUSTOM_RESOURCE_DEFINITIONS, crd["metadata"]["name"])
        body = {**crd, "metadata": {**crd["metadata"], **_rv(current)}}
        try:
            return kube.update(r.CUSTOM_RESOURCE_DEFINITIONS, body)
        except Conflict:
            continue
    raise AssertionError(f"could not replace CRD {crd['metadata']['name']}")


def _rv(obj: Obj) -> dict[str, Any]:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}


def is_established(kube: Client, name: str) -> bool:
    try:
        crd = kube.get(r.CUSTOM_RESOURCE_DEFINITIONS, name)
    except NotFound:
        return False
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def is_served(kube: Client, group: str, version: str, plural: str) -> bool:
    """Discovery lists the resource (the handler is installed)."""
    try:
        listing = kube.request("GET", f"/apis/{group}/{version}")
    except NotFound:
        return False
    return any(res.get("name") == plural for res in listing.get("resources") or [])


def wait_established(kube: Client, crd: Obj, timeout: float = ESTABLISH_TIMEOUT) -> None:
    spec = crd["spec"]
    versions = [v["name"] for v in spec["versions"] if v.get("served", True)]
    deadline = time.monotonic() + timeout
    while True:
        ready = is_established(kube, crd["metadata"]["name"]) and all(
            is_served(kube, spec["group"], v, spec["names"]["plural"]) for v in versions
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"CRD {crd['metadata']['name']} not established in {timeout}s")
        time.sleep(0.1)


def install(kube: Client, paths: tuple[Path, ...] = CRD_FILES) -> list[Obj]:
    """Apply every CRD of `paths` and wait until each is established and served."""
    applied = [apply_crd(kube, crd) for path in paths for crd in load_crds(path)]
    for path in paths:
        for crd in load_crds(path):
            wait_established(kube, crd)
    return applied


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> Iterator[list[Obj]]:
    """The chart's CRDs, applied once per session and established."""
    kube = Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    try:
        yield install(kube)
    finally:
        kube.close()
