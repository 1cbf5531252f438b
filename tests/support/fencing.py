"""Helpers of the scenarios where the lifecycle controller acts on NodeBMCs (BM10-BM13):
`local-ccm-controller-manager` running node-lifecycle and node-bmc together, scoped to one
test's Nodes by a label; Nodes without a kubelet, NotReady for a minute already, whose only
address is one nothing answers (so the probes say `unreachable`); the emulator's request log,
where each ForceOff the controller sent is one line."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from local_ccm.bmc.api import NODEBMCS
from local_ccm.kube.client import Client, Obj
from local_ccm.lifecycle.api import VOLUME_ATTACHMENTS
from local_ccm.names import OUT_OF_SERVICE_TAINT, POWER_OFF_ANNOTATION
from tests.support import bmc, nodes
from tests.support import resources as r
from tests.support.processes import free_port, spawn
from tests.support.sushy import SushyEmulator

LABEL = "bm-lifecycle.local-ccm.io/run"
# NotReady Nodes are eligible after 10 s; they are made NotReady 60 s ago, so at once.
LIFECYCLE = (
    "--not-ready-timeout=10s", "--reconcile-interval=1s", "--ping-timeout=1s", "--ping-count=1",
    "--ping-interval=200ms", "--self-check=false", "--watch-autoscaler-taint=false",
)  # fmt: skip
LEASE = ("--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
         "--leader-elect-retry-period=0.5s")  # fmt: skip


def start(
    kubeconfig: Path, log: Path, *, run: str, credentials: str, extra: Sequence[str] = (),
    lease: tuple[str, str] | None = None, controllers: str = "node-lifecycle,node-bmc",
) -> bmc.Controller:  # fmt: skip
    """The manager with `controllers` (node-lifecycle and node-bmc), managing the Nodes
    labelled `run`; `lease` (namespace, name): elect a leader on it, else none."""
    port = free_port()
    election = ["--leader-elect=false"] if lease is None else [
        "--leader-elect=true", f"--leader-elect-resource-namespace={lease[0]}",
        f"--leader-elect-resource-name={lease[1]}", *LEASE]  # fmt: skip
    argv = [str(bmc.BINARY), f"--controllers={controllers}", f"--kubeconfig={kubeconfig}",
            f"--metrics-bind-address=127.0.0.1:{port}", "--metrics-secure=false",
            "--health-probe-bind-address=0", f"--bmc-poll-interval={bmc.POLL}",
            f"--bmc-credentials-namespace={credentials}", f"--node-selector={LABEL}={run}",
            *LIFECYCLE, *election, *extra]  # fmt: skip
    return bmc.Controller(spawn(log.stem, argv, log, env={"PATH": "/usr/bin:/bin"}), port)


def dead_node(kube: Client, name: str, run: str, address: str, **labels: str) -> Obj:
    """A Node NotReady (Unknown) for a minute, whose InternalIP nothing answers."""
    kube.create(r.NODES, nodes.node_body(name, {LABEL: run, **labels}))
    since = datetime.now(UTC) - timedelta(seconds=60)
    patch = nodes.status_patch(conditions=[nodes.ready_condition("Unknown", since, since)],
                               addresses=[{"type": "InternalIP", "address": address}])  # fmt: skip
    return kube.patch(r.NODES, name, patch, patch_type="merge", subresource="status")


def machine(kube: Client, sushy: SushyEmulator, *, run: str, address: str, credentials: str,
            power: str = "On", **labels: str) -> Obj:  # fmt: skip
    """A System in the emulator, a dead Node and its NodeBMC, all named alike."""
    name = f"f-{secrets.token_hex(3)}"
    sushy.add_system(name, power)
    node = dead_node(kube, name, run, address, **labels)
    bmc.nodebmc(kube, name, sushy.address(name), credentials, caBundle=sushy.ca_pem)
    return node


def force_offs(sushy: SushyEmulator, name: str) -> int:
    """The resets the emulator answered for `name`'s System (its request log, one line per
    request; werkzeug colours some of them, so the quote before the method may not be next to
    it)."""
    wanted = f"POST {sushy.system_path(name)}/Actions/ComputerSystem.Reset "
    return sushy.log_path.read_text(errors="replace").count(wanted)


def power_off(kube: Client, name: str) -> dict[str, Any]:
    """node-bmc's record of the last power-off request ({} without one)."""
    return dict(bmc.status(kube, name).get("powerOff") or {})


def request(kube: Client, name: str) -> str | None:
    annotations = kube.get(NODEBMCS, name)["metadata"].get("annotations") or {}
    found = annotations.get(POWER_OFF_ANNOTATION)
    return found if isinstance(found, str) else None


def exists(kube: Client, node: Obj) -> bool:
    """The Node of that uid still exists (a recycled name is another Node)."""
    found = kube.list(r.NODES, field_selector=f"metadata.name={node['metadata']['name']}")
    return any(n["metadata"]["uid"] == node["metadata"]["uid"] for n in found["items"])


def out_of_service(kube: Client, name: str) -> bool:
    taints = (kube.get(r.NODES, name).get("spec") or {}).get("taints") or []
    return any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints)


def volume_attachment(kube: Client, node: str) -> str:
    """A VolumeAttachment naming `node` (no CSI driver acts on it): the out-of-service step
    waits while it exists."""
    name = f"va-{secrets.token_hex(4)}"
    kube.create(VOLUME_ATTACHMENTS, {
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
        "spec": {"attacher": "csi.test.local-ccm.io", "nodeName": node,
                 "source": {"persistentVolumeName": f"pv-{name}"}},
    })  # fmt: skip
    return name
