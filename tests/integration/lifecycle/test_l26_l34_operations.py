"""L27, L29-L32, L34 (spec/lifecycle.md §12.2): start-up preconditions, unprobed mode,
addresses, the out-of-service taint, invalid flags and family selection."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local_ccm.kube import resources as r
from local_ccm.kube.client import Client
from local_ccm.lifecycle.nodeapi import VOLUME_ATTACHMENTS
from tests.integration.lifecycle.conftest import Setup
from tests.integration.lifecycle.test_l01_l10_scope_and_probes import (
    DELETED,
    controller,
    gone,
    kept,
    uid,
)
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.lifecycle_harness import FAST, eligible_node, reasons
from tests.support.netns import HostLink
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
BINARY = Path(sys.executable).parent / "node-lifecycle-controller"


def test_l27_no_usable_probe_at_start_up(setup: Setup, test_artifacts: Path) -> None:
    cmd = ["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw", "--", str(BINARY),
           *FAST, f"--kubeconfig={setup.kubeconfig}", *setup.argv("--probe=icmp",
           "--icmp-mode=raw", f"--node-selector={setup.selector}")]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 4, done.stderr
    assert time.monotonic() - started < 10
    assert "CAP_NET_RAW" in done.stderr


def test_l29_unprobed_mode(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO)
    node = eligible_node(make_node, str(link.unused_v4))
    with controller(setup, "--ping-count=0") as c:
        eventually(lambda: gone(kube, node), timeout=DELETED, message="deleted")
        assert c.value("unprobed_mode") == 1
        probes = [c.value("probes_total", kind=k, family=f, outcome=o)
                  for k in ("icmp", "tcp") for f in ("ipv4", "ipv6")
                  for o in ("reply", "no_reply", "no_route", "error")]  # fmt: skip
        assert sum(probes) == 0
    assert any(r.levelno == logging.WARNING and "unprobed mode" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_l30_addresses(setup: Setup, make_node: NodeFactory, kube: Client) -> None:
    n1 = eligible_node(make_node, "n1.example.test", address_type="Hostname")
    n2 = eligible_node(make_node, "127.0.0.6", address_type="ExternalIP")
    with controller(setup, "--max-deletions-per-interval=2"):
        kept(kube, n1, n2, seconds=6)
        assert "NoProbeAddress" in reasons(kube, uid(n1))
        assert "NodeReachable" in reasons(kube, uid(n2))


def test_l31_out_of_service_taint(
    setup_oos: Setup, link: HostLink, make_node: NodeFactory, kube: Client, track: Tracker,
) -> None:  # fmt: skip
    setup = setup_oos
    node = eligible_node(make_node, str(link.unused_v4))
    name = node["metadata"]["name"]
    attachment = {
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name, "labels": node["metadata"]["labels"]},
        "spec": {"attacher": "csi.test.local-ccm.io", "nodeName": name,
                 "source": {"persistentVolumeName": f"pv-{name}"}},
    }  # fmt: skip
    kube.create(VOLUME_ATTACHMENTS, attachment)
    track(VOLUME_ATTACHMENTS, name)

    def tainted() -> bool:
        current = kube.get(r.NODES, name)
        taints = current["spec"].get("taints") or []
        annotations = current["metadata"].get("annotations") or {}
        oos = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
               "effect": "NoExecute"}  # fmt: skip
        return oos in taints and "local-ccm.io/out-of-service-applied-at" in annotations

    with controller(setup, "--out-of-service-taint"):
        eventually(tainted, timeout=DELETED, message="out-of-service taint and annotation")
        kept(kube, node, seconds=4)
        kube.delete(VOLUME_ATTACHMENTS, name)
        removed = time.monotonic()
        eventually(lambda: gone(kube, node), timeout=5, interval=0.05, message="deleted")
        assert time.monotonic() - removed <= 2 * 1.0 + 1.0  # two intervals, plus request slack
    assert "OutOfServiceTaintAdded" in reasons(kube, uid(node))


def test_l32_invalid_flags() -> None:
    argv = ["--ping-count=-1", "--reconcile-interval=0", "--max-unhealthy=150%",
            "--probe=udp:1", "--bogus"]  # fmt: skip
    done = subprocess.run([str(BINARY), *argv], capture_output=True, text=True, timeout=30,
                          check=False, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if "--help" not in line]
    assert len(lines) == 5, done.stderr
    for flag in ("--ping-count", "--reconcile-interval", "--max-unhealthy", "--probe", "--bogus"):
        assert sum(flag in line for line in lines) == 1


def test_l34_family_selection(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v6))
    with controller(setup, "--probe-families=ipv4"):
        kept(kube, node, seconds=6)
        assert "NoProbeAddress" in reasons(kube, uid(node))
