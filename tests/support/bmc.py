"""Helpers of the node-bmc scenarios: the manager running only that controller, Nodes without a
kubelet whose readiness the test sets, NodeBMCs and their credentials Secrets, and reads of
what the controller wrote (status, taints, Events, metrics)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import secrets
import ssl
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from local_ccm.bmc.api import NODEBMCS, SECRETS
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Conflict, NotFound
from local_ccm.names import SHUTDOWN_TAINT
from tests.support import crds, nodes
from tests.support import resources as r
from tests.support.binaries import ensure
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.processes import Child, free_port, spawn
from tests.support.waiting import eventually

BINARY = Path(sys.executable).parent / "local-ccm-controller-manager"
CRD_FILE = (Path(__file__).resolve().parents[2] / "charts" / "local-ccm" / "files"
            / "bmc.local-ccm.io_nodebmcs.yaml")  # fmt: skip
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"  # what kubectl get asks for
POLL = "1s"  # --bmc-poll-interval in the scenarios
SETTLE = 20.0  # seconds for the controller to act on a change (a few polls, one backoff)


@contextlib.contextmanager
def plane_with_crd(config: pytest.Config, name: str) -> Iterator[ControlPlane]:
    """A kube-apiserver of its own (`name`) with the NodeBMC CRD established."""
    with dedicated_plane(config, ensure(["etcd", "kube-apiserver"]), name) as started:
        kube = Client.from_kubeconfig(started.admin_kubeconfig, field_manager="bm-test")
        try:
            crds.install(kube, (CRD_FILE,))
        finally:
            kube.close()
        yield started


def start(kubeconfig: Path, log: Path, credentials_namespace: str, *extra: str) -> Controller:
    """The manager with node-bmc alone, polling every `POLL`, plain /metrics on a free port."""
    port = free_port()
    argv = [str(BINARY), "--controllers=node-bmc", "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{port}", "--metrics-secure=false",
            "--health-probe-bind-address=0", f"--kubeconfig={kubeconfig}",
            f"--bmc-poll-interval={POLL}", f"--bmc-credentials-namespace={credentials_namespace}",
            *extra]  # fmt: skip
    return Controller(spawn("node-bmc", argv, log, env={"PATH": "/usr/bin:/bin"}), port)


class Controller:
    def __init__(self, child: Child, metrics_port: int) -> None:
        self.child, self.metrics_port = child, metrics_port

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample of its /metrics (0 when the series is not there)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in (labels or {}).items()):  # fmt: skip
                    return float(sample.value)
        return 0.0


def secret(kube: Client, namespace: str, name: str, username: str, password: str) -> None:
    data = {"username": base64.b64encode(username.encode()).decode(),
            "password": base64.b64encode(password.encode()).decode()}  # fmt: skip
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
    try:
        kube.create(SECRETS, body, namespace=namespace)
    except Conflict:  # it exists: rotated
        kube.patch(SECRETS, name, {"data": data}, patch_type="merge", namespace=namespace)


def namespace(kube: Client) -> str:
    name = f"bmc-{secrets.token_hex(3)}"
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name}})  # fmt: skip
    return name


def node(kube: Client, name: str, ready: str) -> Obj:
    """A Node without a kubelet, its Ready condition as given."""
    kube.create(r.NODES, nodes.node_body(name, {}))
    return set_ready(kube, name, ready)


def set_ready(kube: Client, name: str, ready: str) -> Obj:
    now = datetime.now(UTC)
    patch = nodes.status_patch(conditions=[nodes.ready_condition(ready, now, now)])
    return kube.patch(r.NODES, name, patch, patch_type="merge", subresource="status")


def nodebmc(kube: Client, name: str, address: str, credentials: str, **spec: Any) -> Obj:
    body = {"apiVersion": NODEBMCS.api_version, "kind": NODEBMCS.kind,
            "metadata": {"name": name},
            "spec": {"address": address, "credentialsName": credentials, **spec}}  # fmt: skip
    return kube.create(NODEBMCS, body)


def status(kube: Client, name: str) -> Obj:
    return dict(kube.get(NODEBMCS, name).get("status") or {})


def reachable(kube: Client, name: str) -> Obj:
    """The Reachable condition ({} before the first status)."""
    found = status(kube, name).get("conditions") or []
    return next((c for c in found if c.get("type") == "Reachable"), {})


def power_is(kube: Client, name: str, power: str, reason: str = "Contacted") -> Obj:
    """The status once its power state and Reachable reason are these."""

    def check() -> Obj | None:
        found = status(kube, name)
        return found if (found.get("powerState"), reachable(kube, name).get("reason")) == (
            power, reason) else None  # fmt: skip

    return eventually(check, timeout=SETTLE, message=f"{name}: {power} ({reason})")


def tainted(kube: Client, name: str) -> bool:
    taints = (kube.get(r.NODES, name).get("spec") or {}).get("taints") or []
    return any(t.get("key") == SHUTDOWN_TAINT and t.get("effect") == "NoSchedule" for t in taints)


def events(kube: Client, name: str, kind: str) -> list[Obj]:
    """Events about the object `name` of `kind` (NodeBMC and Node share the name)."""
    found = kube.list(r.EVENTS, namespace="default",
                      field_selector=f"involvedObject.name={name}")["items"]  # fmt: skip
    return [e for e in found if e["involvedObject"]["kind"] == kind]


def reasons(kube: Client, name: str, kind: str) -> list[str]:
    return [e["reason"] for e in events(kube, name, kind)]


def delete(kube: Client, name: str) -> None:
    for res in (NODEBMCS, r.NODES):
        with contextlib.suppress(NotFound):
            kube.delete(res, name)


def table(plane: ControlPlane, path: str) -> Any:
    """GET as a server-side Table: what `kubectl get` prints."""
    where = plane.http
    context = ssl.create_default_context(cafile=str(where.ca_file))
    context.load_cert_chain(str(where.cert_file), str(where.key_file))
    conn = http.client.HTTPSConnection("127.0.0.1", where.port, context=context, timeout=10)
    try:
        conn.request("GET", path, headers={"Accept": TABLE})
        answer = conn.getresponse()
        body = answer.read()
        assert answer.status == 200, body[:500]
        return json.loads(body)
    finally:
        conn.close()
