"""A real node leaves the machine as it found it: links, network namespaces, mounts, cgroups,
the kernel tunables and net.* settings the kubelet, kube-proxy and the CNI plugins change, node
processes and the paths they write by default are the same before and after its whole life (a
Pod on the CNI bridge and kube-proxy included). A driver killed while its node runs takes the
node's processes with it, and the next start removes the rest (namespaces, cgroups, the node
directory).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.support import cpargs, hostsnap
from tests.support import nodeconf as nc
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.chart import REPO
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.kcm import start_kcm
from tests.support.realnode import NODE_BASE, READY_TIMEOUT, RealNode, real_node
from tests.support.realnode_cluster import (
    FIELD_MANAGER,
    Cluster,
    NodeOptions,
    node_number,
    node_spec,
    realnode_cluster,
    require_real_node,
)
from tests.support.realnode_driver import spec_to_json
from tests.support.waiting import eventually

POD_TIMEOUT = 120.0


def run_pause_pod(cluster: Cluster) -> dict[str, Any]:
    """A Pod of the pause image on the pod network (not hostNetwork): a sandbox, a container,
    a network namespace on the CNI bridge; returns it once Running."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "isolation", "namespace": "default"},
        "spec": {
            "containers": [{"name": "pause", "image": cluster.node.spec.pause.name,
                            "imagePullPolicy": "Never"}],
            "tolerations": [{"operator": "Exists"}],  # the uninitialized taint stays
        },
    }  # fmt: skip
    cluster.kube.create(r.PODS, pod, namespace="default")

    def running() -> dict[str, Any] | None:
        found = cluster.kube.get(r.PODS, "isolation", namespace="default")
        return found if found["status"].get("phase") == "Running" else None

    return eventually(running, timeout=POD_TIMEOUT, message=f"pod Running\n{cluster.node.tails()}")


def inside(node: RealNode, path: str) -> str:
    """A file as the node's processes see it (its mount namespace)."""
    argv = ["nsenter", "-t", str(node.pid1), "-m", "cat", path]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_a_node_s_whole_life_leaves_the_host_as_it_found_it(
    request: pytest.FixtureRequest, binaries: Binaries
) -> None:
    hostsnap.prime_netns_dir()
    before = hostsnap.take()
    # kube-proxy too (E09's node): its rules, sysctls and process must stay the node's
    with realnode_cluster(request.config, binaries,
                          options=NodeOptions(kube_proxy=True)) as cluster:  # fmt: skip
        pod = run_pause_pod(cluster)
        assert IPv4Address(pod["status"]["podIP"]) in nc.POD_SUBNET
        during = hostsnap.take()
        names = cluster.node.names
        assert {names.node_ns, names.gateway_ns} <= during.namespaces
        # Counted against `before`, so a node another run keeps up meanwhile does not count.
        more = {comm: during.processes.get(comm, 0) - before.processes.get(comm, 0)
                for comm in ("kubelet", "kube-proxy", "containerd", "containerd-shim",
                             "pause")}  # fmt: skip
        assert more["kubelet"] == 1
        assert more["kube-proxy"] == 1
        assert more["containerd"] == 1
        assert more["containerd-shim"] >= 1
        # The Pod's processes are counted in the node's own cgroup: host-wide, a pause process
        # of the previous module's node that is still exiting would cancel one of them out.
        assert hostsnap.processes_in_cgroup(names.cgroup)["pause"] >= 2  # sandbox, container
        roots = cluster.node.roots
        assert any((root / names.cgroup / "kubepods").is_dir() for root in roots)
        for key, value in nc.KERNEL_TUNABLES.items():
            assert inside(cluster.node, f"/proc/sys/{key}") == str(value)
        assert during.sysctls == before.sysctls
        assert during.paths == before.paths
    after = hostsnap.take()
    assert hostsnap.differences(before, after) == {}


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The driver's first line of output, or AssertionError when it ends or time runs out."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if sel.select(timeout) and (line := proc.stdout.readline()):
            return line.strip()
    raise AssertionError(f"the driver said nothing in {timeout:.0f} s (exit {proc.poll()})")


@contextmanager
def driver_plane(
    config: pytest.Config, binaries: Binaries
) -> Iterator[tuple[ControlPlane, Client]]:
    """A plane for nodes the test starts itself (KCM too: the Ready node loses its not-ready
    taint as on any cluster)."""
    with dedicated_plane(config, binaries, "realnode-plane") as plane:
        start_kcm(plane, binaries, controllers=cpargs.REAL_NODE_CONTROLLERS)
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube:
            yield plane, kube


def test_a_killed_driver_s_node_dies_with_it_and_the_next_start_sweeps_the_rest(
    request: pytest.FixtureRequest, binaries: Binaries
) -> None:
    require_real_node()
    hostsnap.prime_netns_dir()
    before = hostsnap.take()
    with driver_plane(request.config, binaries) as (plane, kube):
        names = nc.NodeNames(os.getpid(), node_number(request.config), NODE_BASE)
        spec = node_spec(plane, binaries, names)
        spec_file = spec.logs / "driver-spec.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(spec_to_json(spec, admin_kubeconfig=plane.admin_kubeconfig,
                                          base=NODE_BASE))  # fmt: skip
        with (spec.logs / "driver.log").open("w") as err:
            driver = subprocess.Popen(
                [sys.executable, "-m", "tests.support.realnode_driver", str(spec_file)],
                cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True,
            )  # fmt: skip
        try:
            line = read_line(driver, READY_TIMEOUT + 30)
        finally:
            driver.send_signal(signal.SIGKILL)
            driver.communicate()  # reaps it and closes its stdout
        node_dir = Path(line.removeprefix("ready "))
        tag = node_dir.name
        assert nc.owner_pid(tag) == driver.pid

        # The node dies with its driver: setpriv's KILL reaches unshare, --kill-child PID 1.
        eventually(lambda: hostsnap.take().processes == before.processes, timeout=30,
                   message="the killed driver's node processes are gone")  # fmt: skip
        left = hostsnap.take()
        assert {tag, f"{tag}-gw"} <= left.namespaces
        assert any(c.endswith(f"/{tag}") for c in left.cgroups)
        assert node_dir.is_dir()

        names = nc.NodeNames(os.getpid(), node_number(request.config), NODE_BASE)
        with real_node(node_spec(plane, binaries, names), names) as node:
            node.wait_ready(kube)
            swept = hostsnap.take()
            assert not {tag, f"{tag}-gw"} & swept.namespaces
            assert not [c for c in swept.cgroups if c.endswith(f"/{tag}")]
            assert not node_dir.exists()
    after = hostsnap.take()
    assert hostsnap.differences(before, after) == {}
