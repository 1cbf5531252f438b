"""Candidate selection against real kernel state and the real apiserver (A11-A13).
``--run-once`` passes in-process; A13's detect mode runs the real binary unprivileged, the
whole process in the namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options, run_once
from tests.support.agent_process import run_binary
from tests.support.agent_scenarios import condition_is, initialised, kubelet_seed, pairs
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


def internal_ips(kube: Client, name: str) -> list[str]:
    return [a for t, a in pairs(kube.get(r.NODES, name)) if t == "InternalIP"]


def test_a11_cidr_selection_and_exclusion(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(node_if="eth1", v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None)
    up.node.add_address("eth1", "198.51.100.20/24")
    admin, ns = control_plane.admin_kubeconfig, up.node.name
    first = make_node(uninitialized=True)["metadata"]["name"]
    argv = [
        "--run-once",
        "--internal-ip-cidrs=198.51.100.0/24",
        "--external-ip-target=",
        *QUIET_HTTP,
    ]
    assert run_once(options([f"--node-name={first}", *argv], admin), netns=ns) == 0
    assert pairs(kube.get(r.NODES, first)) == [("InternalIP", "198.51.100.20")]
    second = make_node(uninitialized=True)["metadata"]["name"]
    argv = [
        "--run-once",
        "--internal-ip-target=192.0.2.1",
        "--internal-ip-cidrs=!192.0.2.0/24",
        "--external-ip-target=",
        *QUIET_HTTP,
    ]
    assert run_once(options([f"--node-name={second}", *argv], admin), netns=ns) == 0
    assert internal_ips(kube, second) == ["198.51.100.20"]


def test_a12_vips_and_deprecated_ipv6_addresses_are_not_selected(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(
        node_if="eth1",
        v4=("192.0.2.10/24", "192.0.2.1/24"),
        v6=("2001:db8:1::10/64", "2001:db8:1::1/64"),
        default_routes=False,
    )
    node = up.node
    node.add_address("eth1", "192.0.2.100/32")
    node.add_address("eth1", "2001:db8:1::5/64", options=("preferred_lft", "0"))
    node.ip("route", "replace", "192.0.2.1/32", "dev", "eth1", "src", "192.0.2.100")
    node.ip("-6", "route", "replace", "2001:db8:1::1/128", "dev", "eth1", "src", "2001:db8:1::5")
    assert "src 192.0.2.100" in node.ip("route", "get", "192.0.2.1")
    assert "src 2001:db8:1::5" in node.ip("-6", "route", "get", "2001:db8:1::1")
    argv = [
        "--run-once",
        "--internal-ip-target=192.0.2.1,2001:db8:1::1",
        "--external-ip-target=",
        *QUIET_HTTP,
    ]
    admin = control_plane.admin_kubeconfig
    plain = make_node(uninitialized=True)["metadata"]["name"]
    assert run_once(options([f"--node-name={plain}", *argv], admin), netns=node.name) == 0
    assert internal_ips(kube, plain) == ["192.0.2.10", "2001:db8:1::10"]
    vips = make_node(uninitialized=True)["metadata"]["name"]
    with_vips = [f"--node-name={vips}", *argv, "--include-vips"]
    assert run_once(options(with_vips, admin), netns=node.name) == 0
    assert internal_ips(kube, vips) == ["192.0.2.100", "2001:db8:1::10"]


def test_a13_cni_interface_is_excluded_by_default(
    *,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    test_artifacts: Path,
) -> None:
    ns = netns()
    ns.add_veth("cilium_host", "cilium_net")
    ns.add_address("cilium_host", "192.0.2.10/24")
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.10")["metadata"]["name"]
    kubelet_seed(kube, name)
    argv = [
        f"--node-name={name}",
        "--internal-ip-target=192.0.2.1",
        "--external-ip-target=",
        *FAST,
        *QUIET_HTTP,
    ]
    admin = control_plane.admin_kubeconfig
    with InProcessAgent(options(argv, admin), netns=ns.name):
        eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        eventually(lambda: condition_is(kube, name, "False", "NoEligibleAddress"), timeout=10)
    detect = ["detect", "--internal-ip-target=192.0.2.1", "--external-ip-target="]
    done = run_binary(ns.name, detect, log_path=test_artifacts / "detect.log")
    assert done.code == 1, done
    assert "excluded: interface matches cilium_*" in done.stdout, done.stdout
    with InProcessAgent(options([*argv, "--interface-exclude=lo"], admin), netns=ns.name):
        eventually(lambda: condition_is(kube, name, "True", "AddressesSynced"), timeout=10)
    assert pairs(kube.get(r.NODES, name)) == [("InternalIP", "192.0.2.10"), ("Hostname", name)]
