"""kwok fake kubelets for the smoke test and the bench tier."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import names
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.processes import Child, StartupError, spawn, tail

MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"
CHAOS_LABEL = "node-not-ready.stage.kwok.x-k8s.io"
STAGES = ("node-initialize", "node-heartbeat-with-lease", "node-not-ready")
READY_TIMEOUT = 60.0


# ------------------------------------------------------------------ pure: configuration, bodies
def render_kwok_config(stage_docs: Sequence[str], settings: Mapping[str, Any] | None = None) -> str:
    """One multi-document kwok.yaml: the Stage documents, then an optional KwokConfiguration.

    Pure, no I/O. Raises ValueError unless every stage in STAGES is present, because kwok
    without stages exits with "no stages found", which would be a harness bug.
    """
    docs = [d for text in stage_docs for d in yaml.safe_load_all(text) if d]
    found = {d["metadata"]["name"] for d in docs if d.get("kind") == "Stage"}
    if missing := sorted(set(STAGES) - found):
        raise ValueError(f"kwok stage files are missing stages {missing} (have {sorted(found)})")
    wanted = [d for d in docs if d.get("kind") == "Stage" and d["metadata"]["name"] in STAGES]
    if settings:
        wanted.append(
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": dict(settings),
            }
        )
    return yaml.safe_dump_all(wanted, sort_keys=False)


def fake_node_body(
    name: str,
    labels: Mapping[str, str],
    *,
    addresses: Sequence[Mapping[str, str]] = (),
    provider_id: str | None = None,
    taint: bool = False,
) -> dict[str, Any]:
    """A Node kwok will manage: selected by annotation, addresses preset at creation. Pure."""
    spec: dict[str, Any] = {}
    if provider_id:
        spec["providerID"] = provider_id
    if taint:
        spec["taints"] = [
            {"key": MANAGED_ANNOTATION, "value": MANAGED_VALUE, "effect": "NoSchedule"}
        ]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(labels),
            "annotations": {MANAGED_ANNOTATION: MANAGED_VALUE},
        },
        "spec": spec,
    }
    if addresses:
        body["status"] = {"addresses": with_hostname(name, addresses)}
    return body


def with_hostname(name: str, addresses: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """`addresses` plus a Hostname entry when there is none. Pure.

    kwok v0.8.0's node-initialize stage renders an empty `addresses:` (wiping the preset list)
    when InternalIP is present but Hostname is missing; with both present it leaves them alone.
    """
    out = [dict(a) for a in addresses]
    if not any(a.get("type") == "Hostname" for a in out):
        out.append({"type": "Hostname", "address": name})
    return out


def loopback_address(index: int) -> str:
    """A distinct loopback InternalIP per fake node (127.1.x.y; Linux answers on all of 127/8)."""
    if not 0 <= index < 254 * 254:
        raise ValueError(f"index {index} out of range")
    return f"127.1.{index // 254}.{index % 254 + 1}"


def is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# ------------------------------------------------------------------ process
@dataclass(frozen=True)
class Kwok:
    child: Child
    config: Path


def start_kwok(
    cp: ControlPlane,
    binaries: Binaries,
    *,
    lease_seconds: int = 40,
    node_ip: str = "127.0.0.1",
    settings: Mapping[str, Any] | None = None,
) -> Kwok:
    """Start kwok against `cp` and wait until a probe node turns Ready."""
    if binaries.kwok_stages is None:
        raise StartupError("kwok stage files were not ensured (binaries.ensure(['kwok']))")
    stage_docs = [p.read_text() for p in sorted(binaries.kwok_stages.glob("*.yaml"))]
    config = cp.workdir / "kwok.yaml"
    config.write_text(render_kwok_config(stage_docs, settings))
    args = [
        str(binaries.path("kwok")),
        f"--kubeconfig={cp.admin_kubeconfig}",
        f"-c={config}",  # explicit: otherwise kwok reads ~/.kwok/kwok.yaml
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={MANAGED_ANNOTATION}={MANAGED_VALUE}",
        f"--node-ip={node_ip}",
        f"--node-lease-duration-seconds={lease_seconds}",
    ]
    child = spawn("kwok", args, cp.logs_dir / "kwok.log", die_with_parent=not cp.options.keep)
    cp.adopt(child)
    _wait_probe_node(cp, child)
    return Kwok(child, config)


def _wait_probe_node(cp: ControlPlane, child: Child) -> None:
    name = f"lcct-kwok-probe-{secrets.token_hex(3)}"
    labels = {names.RUN_LABEL: cp.options.run_id}
    cp.http.ok("POST", "/api/v1/nodes", fake_node_body(name, labels))
    deadline = time.monotonic() + READY_TIMEOUT
    try:
        while not is_ready(cp.http.ok("GET", f"/api/v1/nodes/{name}")):
            if child.exited() is not None or time.monotonic() >= deadline:
                raise StartupError(
                    f"kwok: probe node {name} not Ready within {READY_TIMEOUT:.0f} s "
                    f"(exit code {child.exited()}); last log lines:\n{tail(child.log_path, 50)}"
                )
            time.sleep(0.2)
    finally:
        cp.http.request("DELETE", f"/api/v1/nodes/{name}")


def create_fake_nodes(
    create: Any, bodies: Sequence[Mapping[str, Any]], *, workers: int = 4
) -> list[dict[str, Any]]:
    """Create Nodes in parallel from a small pool; `create(body)` is e.g. a bound Client method."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(create, bodies))
