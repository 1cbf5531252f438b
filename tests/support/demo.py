"""The agent-only demo (what `make demo` falls back to on a machine that cannot run a real node,
tests/support/demo_realnode.py): the agent initialises a Node for this host, against a
throw-away control plane.

1. Finds or builds etcd and kube-apiserver (the harness's binary cache) and starts both on
   loopback: its own plane, never a person's dev cluster.
2. Registers a Node named after this host as a kubelet with ``--cloud-provider=external``
   would: the ``uninitialized`` taint, no addresses, ``systemUUID`` set.
3. Shows ``local-ccm detect`` (what the agent would write for this host), then runs
   ``local-ccm --run-once`` with the default detection flags (``--external-ip-target=8.8.8.8``:
   a route lookup, nothing is sent) in this process's own network namespace, as the least
   privileged user the agent needs.
4. Prints the Node before and after, explains a missing address, tears everything down.

Exit 0: the Node was initialised. 1: it was not (the reason is printed). 3: the demo itself
could not run (binaries, control plane). ``python -m tests.support.demo [--node-name N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_ccm import names as product
from local_ccm.kube.client import Client
from tests.support import names, nodes
from tests.support import resources as r
from tests.support.controlplane import ControlPlane, Options, artifacts_root, start_control_plane

EXIT_INITIALISED, EXIT_NOT_INITIALISED, EXIT_DEMO_FAILED = 0, 1, 3
AGENT_USER = "local-ccm-demo-agent"
FIELD_MANAGER = "local-ccm-demo"
KUBELET_VERSION = "v1.37.1"  # what the registering "kubelet" reports; informational only
# What the agent needs: its own Node, its status, Events about it. The
# verbs are the chart's; the demo grants events cluster-wide instead of the
# chart's Role in `default`, because it renders no chart (it needs no helm build).
AGENT_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
_NOT_NAME = re.compile(r"[^a-z0-9.-]+")


# ------------------------------------------------------------------ pure: names and bodies
def node_name_for(hostname: str) -> str:
    """The Node name a kubelet would register for ``hostname``: lower-cased, DNS-1123-safe."""
    name = _NOT_NAME.sub("-", hostname.strip().lower())
    name = re.sub(r"\.{2,}", ".", name)[:253].strip(".-")
    return name or "localhost"


def kubelet_node(name: str, ids: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Node body, status merge patch) as a kubelet with --cloud-provider=external and no
    --node-ip registers since Kubernetes 1.29: tainted, no addresses (kubernetes#121028)."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", names.RUN_LABEL: "demo"}  # fmt: skip
    body = nodes.node_body(name, labels, uninitialized=True)
    info = {"machineID": ids["machine_id"], "systemUUID": ids["system_uuid"],
            "bootID": ids["boot_id"], "kubeletVersion": KUBELET_VERSION,
            "operatingSystem": "linux", "architecture": "amd64"}  # fmt: skip
    return body, {"status": {"nodeInfo": info}}


def describe_node(node: Mapping[str, Any]) -> list[str]:
    """The lines the demo prints for a Node: addresses, taints, the agent's marks."""
    status, meta = node.get("status") or {}, node.get("metadata") or {}
    found = [f"{a['type']} {a['address']}" for a in status.get("addresses") or []]
    taints = [_taint(t) for t in (node.get("spec") or {}).get("taints") or []]
    lines = [
        f"  addresses: {', '.join(found) or '(none)'}",
        f"  taints:    {taints[0] if taints else '(none)'}",
    ]
    lines += [f"             {t}" for t in taints[1:]]
    owned = (meta.get("annotations") or {}).get(product.OWNED_ADDRESSES_ANNOTATION)
    if owned is not None:
        lines.append(f"  annotation {product.OWNED_ADDRESSES_ANNOTATION}={owned}")
    for c in status.get("conditions") or []:
        if c.get("type") == product.ADDRESSES_SYNCED_CONDITION:
            lines.append(f"  condition {c['type']}={c['status']} {c.get('reason', '')}: "
                         f"{c.get('message', '')}".rstrip(": "))  # fmt: skip
    return lines


def _taint(taint: Mapping[str, str]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    note = ""
    if taint["key"] == "node.kubernetes.io/not-ready":
        note = "  (added by the apiserver's TaintNodesByCondition; not the agent's to remove)"
    return f"{taint['key']}{value}:{taint['effect']}{note}"


def is_initialised(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return all(t.get("key") != product.UNINITIALIZED_TAINT for t in taints)


def explain(detections: Sequence[Mapping[str, Any]], initialised: bool) -> list[str]:
    """Why the Node got (or did not get) its addresses, from ``local-ccm detect --output=json``."""
    failed = [d for d in detections if d.get("result") == "failed"]
    found = [d for d in detections if d.get("result") == "found"]
    lines = [_why_failed(d) for d in failed]
    if initialised:
        addresses = ", ".join(f"{d['type']} {d['address']}" for d in found)
        done = [f"The Node is initialised: the agent wrote {addresses}, then removed the "
                f"{product.UNINITIALIZED_TAINT} taint."]  # fmt: skip
        if not any(d["type"] == "InternalIP" for d in found):
            done.append(
                "No InternalIP detector is enabled by default (--internal-ip-target is empty, "
                "as in the original): on a real Node the kubelet's --node-ip provides it, or "
                "set --internal-ip-target / --internal-ip-cidrs."
            )
        return [*done, *lines]
    if not found:
        lines.append(
            "No detector found an address, so the Node would have no InternalIP or ExternalIP; "
            "the agent keeps the uninitialized taint rather than let pods land on a Node "
            "without addresses. On such a host, configure "
            "--internal-ip-cidrs=<node subnet> or --internal-ip-target=<a neighbour>, or start "
            "the kubelet with --node-ip."
        )
    return ["The Node is NOT initialised.", *lines]


def _why_failed(detection: Mapping[str, Any]) -> str:
    what = f"{detection['type']} ({detection['family']})"
    if detection.get("reason") == "no_route":
        return (
            f"{what}: this host has no route to {detection.get('target')} (no default route). "
            f"The agent only asks the kernel which source address it would use to reach that "
            f"target (nothing is sent), and the kernel answered: {detection.get('detail')}."
        )
    return f"{what}: detection failed: {detection.get('detail', detection.get('reason'))}."


# ------------------------------------------------------------------ I/O
def machine_ids() -> dict[str, str]:
    """systemUUID, machineID and bootID as a kubelet reads them (random when unreadable)."""

    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip() or None
        except OSError:
            return None

    machine = read("/etc/machine-id") or uuid.uuid4().hex
    return {
        "system_uuid": read("/sys/class/dmi/id/product_uuid") or str(uuid.UUID(machine[:32])),
        "machine_id": machine,
        "boot_id": read("/proc/sys/kernel/random/boot_id") or str(uuid.uuid4()),
    }


def start_plane() -> ControlPlane:
    from tests.support.binaries import ensure  # noqa: PLC0415 - may build on a cold cache

    def report(line: str) -> None:  # a cache hit needs no build history
        print(f"  {line.partition('; wall')[0] if 'cache hit' in line else line}", flush=True)

    binaries = ensure(["etcd", "kube-apiserver"], report=report)
    run_id = names.new_run_id(datetime.now(UTC), os.getpid())
    opts = Options(run_id, artifacts_root(os.environ) / run_id, Path(tempfile.gettempdir()),
                   plane="demo")  # fmt: skip
    return start_control_plane(binaries, opts)


def grant_agent(kube: Client, cp: ControlPlane) -> Path:
    """A client-certificate user bound to exactly the agent's permissions; its kubeconfig."""
    meta = {"name": AGENT_USER}
    rbac = "rbac.authorization.k8s.io"
    kube.create(r.CLUSTER_ROLES, {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole",
                                  "metadata": meta, "rules": AGENT_RULES})  # fmt: skip
    subject = {"kind": "User", "name": AGENT_USER, "apiGroup": rbac}
    role = {"kind": "ClusterRole", "name": AGENT_USER, "apiGroup": rbac}
    kube.create(r.CLUSTER_ROLE_BINDINGS, {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding",
                "metadata": meta, "roleRef": role, "subjects": [subject]})  # fmt: skip
    return cp.user_kubeconfig(AGENT_USER, [])


def register_node(kube: Client, name: str) -> dict[str, Any]:
    body, status = kubelet_node(name, machine_ids())
    kube.create(r.NODES, body)
    node: dict[str, Any] = kube.patch(
        r.NODES, name, status, patch_type="merge", subresource="status"
    )
    return node


def local_ccm() -> str:
    beside = Path(sys.executable).with_name("local-ccm")
    return str(beside) if beside.exists() else shutil.which("local-ccm") or "local-ccm"


def run_agent_cli(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ``local-ccm <argv>``, echo the command and its output, indented."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
    print(f"$ local-ccm {' '.join(argv)}", flush=True)
    started = time.monotonic()
    done = subprocess.run([local_ccm(), *argv], capture_output=True, text=True, env=env,
                          timeout=120, check=False)  # fmt: skip
    for line in (done.stdout + done.stderr).splitlines():
        print(f"  {line}")
    print(f"  [exit {done.returncode} after {time.monotonic() - started:.1f} s]", flush=True)
    return done


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def show_events(kube: Client, name: str) -> None:
    found = kube.list(r.EVENTS, namespace="default", field_selector=f"involvedObject.name={name}")
    events = [f"{e.get('reason')} ({e.get('type')})" for e in found.get("items") or []]
    print(f"  events:    {', '.join(events) or '(none)'}")


def detections() -> list[dict[str, Any]]:
    """``local-ccm detect --output=json`` (read-only, no cluster): the explanation's input."""
    done = subprocess.run([local_ccm(), "detect", "--output=json"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    found: list[dict[str, Any]] = json.loads(done.stdout)["detections"]
    return found


def with_plane(cp: ControlPlane, name: str) -> int:
    print(f"  kube-apiserver {cp.version} at {cp.api_url}; logs in {cp.logs_dir}")
    with Client.from_kubeconfig(cp.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube:
        heading(f'2. Node "{name}", registered as a kubelet with --cloud-provider=external would')
        register_node(kube, name)
        kubeconfig = grant_agent(kube, cp)
        print("BEFORE")
        print("\n".join(describe_node(kube.get(r.NODES, name))))
        heading("3. what the agent would write for this host (no cluster needed)")
        run_agent_cli(["detect"])
        heading("4. the agent, one pass, default detection flags, this host's network namespace")
        print(f"  (as user {AGENT_USER}, allowed only: nodes get/list/watch/patch, "
              "nodes/status patch, events create/patch)")  # fmt: skip
        run_agent_cli(["--run-once", f"--node-name={name}", f"--kubeconfig={kubeconfig}"])
        after = kube.get(r.NODES, name)
        print("AFTER")
        print("\n".join(describe_node(after)))
        show_events(kube, name)
    initialised = is_initialised(after)
    heading("result")
    for paragraph in explain(detections(), initialised):
        print(
            textwrap.fill(paragraph, width=100, subsequent_indent="  ", break_on_hyphens=False),
            flush=True,
        )
    return EXIT_INITIALISED if initialised else EXIT_NOT_INITIALISED


def demo(name: str) -> int:
    heading("1. a control plane of its own: etcd + kube-apiserver on loopback")
    try:
        cp = start_plane()
    except Exception as exc:  # a cold build or a start-up failure: say so, exit 3
        print(f"demo: could not start the control plane: {exc}", file=sys.stderr)
        return EXIT_DEMO_FAILED
    code = EXIT_DEMO_FAILED
    try:
        code = with_plane(cp, name)
    except Exception as exc:
        print(f"demo: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        heading("teardown")
        cp.stop()
        if code != EXIT_DEMO_FAILED:
            shutil.rmtree(cp.options.artifacts, ignore_errors=True)
        kept = f"; logs kept in {cp.options.artifacts}" if code == EXIT_DEMO_FAILED else ""
        print(f"  control plane stopped and its data deleted{kept}; exit {code}", flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    default = node_name_for(socket.gethostname())
    parser.add_argument("--node-name", default=default, help=f"default: {default} (this host)")
    args = parser.parse_args(argv)
    os.environ.pop("KUBECONFIG", None)  # never a person's cluster: only the demo's own plane
    print(f"local-ccm demo: initialise Node {args.node_name!r} for this host", flush=True)
    return demo(node_name_for(args.node_name))


if __name__ == "__main__":
    sys.exit(main())
