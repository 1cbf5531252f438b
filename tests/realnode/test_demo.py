"""`make demo` on real nodes (tests/support/demo_realnode.py), end to end as a subprocess: exit
0, each of its eight steps printed as it happened with the objects before and after, the total
time, and the machine as it was before (links, namespaces, mounts, cgroups, node processes,
sysctls, the paths a node writes: tests/support/hostsnap.py)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest

from tests.support import hostsnap
from tests.support import nodeconf as nc
from tests.support.chart import REPO
from tests.support.realnode_cluster import require_real_node

DEMO = [sys.executable, "-m", "tests.support.demo_realnode"]
# The demo took about 50 s on an idle 2-core machine; its own waits allow 240 s per step.
pytestmark = pytest.mark.timeout(900)
STEPS = [
    "step 1/8: a control plane of its own",
    "step 2/8: the chart, as `make release` ships it",
    "step 3/8: a real node registers (kubelet --cloud-provider=external, serverTLSBootstrap",
    "step 4/8: helm install: the agent and local-ccm-controller-manager",
    "step 5/8: the kubelet's serving certificate",
    "step 6/8: node IPAM: a ClusterCIDR 192.0.2.128/25",
    "step 7/8: service-lb-ipam: a Service of type LoadBalancer, pool 203.0.113.240/28",
    "step 8/8: Node lcrn-",
]


@pytest.fixture(scope="module")
def run() -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    require_real_node()
    hostsnap.prime_netns_dir()
    before = hostsnap.take()
    with subprocess.Popen(DEMO, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:  # fmt: skip
        stdout, stderr = proc.communicate(timeout=880)
    done = subprocess.CompletedProcess(DEMO, proc.returncode, stdout, stderr)
    left = ours(hostsnap.differences(before, hostsnap.take()), proc.pid)
    return done, {**left, **leftover_processes(proc.pid)}


def ours(found: dict[str, Any], pid: int) -> dict[str, Any]:
    """The differences that are the demo's: names of other runs' nodes (``lcrn-<their pid>-``,
    e.g. a realnode module beside this one) are not; process counts are checked by
    :func:`leftover_processes` instead, as they cannot say whose they are."""
    mine = f"{nc.PREFIX}-{pid}-"
    kept: dict[str, Any] = {}
    for key, change in found.items():
        if "appeared" in change:
            change = {k: [n for n in v if is_mine(str(n), mine)] for k, v in change.items()}  # noqa: PLW2901
        if key != "processes" and any(change.values()):
            kept[key] = change
    return kept


def is_mine(name: str, mine: str) -> bool:
    return mine in name or f"{nc.PREFIX}-" not in name


def leftover_processes(pid: int) -> dict[str, Any]:
    """Processes whose command line names one of the demo's nodes (``lcrn-<pid>-``)."""
    mine, found = f"/{nc.PREFIX}-{pid}-".encode(), []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and mine in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return {"processes": found} if found else {}


def section(stdout: str, step: int) -> str:
    return stdout.split(f"== step {step}/8:", 1)[1].split("\n== ", 1)[0]


def test_demo_every_step_happens_and_it_exits_0(
    run: tuple[subprocess.CompletedProcess[str], dict[str, object]],
) -> None:
    done, _ = run
    assert done.returncode == 0, done.stdout + done.stderr
    for step in STEPS:
        assert f"== {step}" in done.stdout, done.stdout
    assert done.stdout.count("  -> ok: ") == 8, done.stdout
    assert re.search(r"8/8 steps in \d+\.\d s total; exit 0", done.stdout), done.stdout


def test_demo_shows_the_objects_before_and_after(
    run: tuple[subprocess.CompletedProcess[str], dict[str, object]],
) -> None:
    out = run[0].stdout
    registered = section(out, 3)
    assert "addresses: Hostname lcrn-" in registered
    assert "node.cloudprovider.kubernetes.io/uninitialized:NoSchedule" in registered
    initialised = section(out, 4).split("AFTER", 1)[1].split("-> ok", 1)[0]
    assert "addresses: InternalIP 192.0.2.10, Hostname lcrn-" in initialised
    assert "node.cloudprovider.kubernetes.io/uninitialized" not in initialised
    assert "topology.kubernetes.io/zone=demo-zone-a" in initialised
    assert "Approved by KubeletServingApproved, signed" in section(out, 5)
    pod = section(out, 6)
    # Bound or not yet (the scheduler may be quicker than the read), but without an IP: the
    # node has no pod CIDR, so no CNI network, before the ClusterCIDR.
    before = pod.split("AFTER", 1)[0]
    assert re.search(r"Pod demo on (\(unbound\)|lcrn-\S+): Pending, podIP \(none\)\n", before), pod
    found = re.search(r"Pod demo on lcrn-\S+: Running, podIP (\S+)\n", pod)
    cidr = re.search(r"podCIDRs:  (\S+)\n", pod.split("AFTER", 1)[1])
    assert found, pod
    assert cidr, pod
    assert ip_address(found[1]) in ip_network(cidr[1]), pod
    assert ip_network(cidr[1]).subnet_of(ip_network("192.0.2.128/25"))  # type: ignore[arg-type]
    assert re.search(r"loadBalancer ingress 203\.0\.113\.2(4\d|5[0-5])\n", section(out, 7))
    deleted = section(out, 8)
    assert "event DeletingNode: deleting Node lcrn-" in deleted
    assert re.search(r"Node lcrn-\S+: deleted", deleted)


def test_demo_leaves_the_machine_as_it_found_it(
    run: tuple[subprocess.CompletedProcess[str], dict[str, object]],
) -> None:
    assert run[1] == {}
