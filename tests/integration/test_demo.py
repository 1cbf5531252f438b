"""`make demo` end to end (tests/support/demo.py): its own control plane, a Node registered as
a kubelet with --cloud-provider=external would, the real `local-ccm` CLI, before and after.

Both runs put the whole demo - control plane included - in a network namespace, so nothing
depends on this machine's real routes: one with a default route (the Node is initialised), one
with only `lo`, as in `unshare --net` (the agent explains why no address was found).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.netns import NetnsFactory, require_root

ROOT = Path(__file__).resolve().parents[2]
DEMO = [sys.executable, "-m", "tests.support.demo"]
# Each run starts its own etcd + kube-apiserver (about 5 s, more on a busy 2-core machine)
# on top of the tier's work, so the integration default of 60 s is too tight.
pytestmark = [pytest.mark.netns, pytest.mark.timeout(150)]


def run_demo(prefix: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *DEMO, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=140, check=False)  # fmt: skip


def after_section(stdout: str) -> str:
    return stdout.split("\nAFTER\n", 1)[1].split("\n== result", 1)[0]


def test_demo_with_a_default_route_initialises_the_node(netns: NetnsFactory) -> None:
    up = netns.uplink(v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None)
    done = run_demo(["ip", "netns", "exec", up.node.name], "--node-name=Demo_Host.Example")
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'Node "demo-host.example"' in done.stdout
    after = after_section(done.stdout)
    assert "addresses: ExternalIP 192.0.2.10" in after, done.stdout
    assert "node.cloudprovider.kubernetes.io/uninitialized" not in after, done.stdout
    assert "The Node is initialised: the agent wrote ExternalIP 192.0.2.10" in done.stdout


def test_demo_without_a_default_route_explains_and_exits_1() -> None:
    require_root()
    sandbox = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    done = run_demo(sandbox)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ExternalIP  ipv4    -             failed              no route to 8.8.8.8" in (
        done.stdout
    )
    after = after_section(done.stdout)
    assert "addresses: (none)" in after, done.stdout
    assert "node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule" in after
    explained = " ".join(done.stdout.split("\n== result", 1)[1].split())
    assert "The Node is NOT initialised." in explained
    assert "this host has no route to 8.8.8.8 (no default route)" in explained
    assert "keeps the uninitialized taint" in explained
    assert "control plane stopped and its data deleted; exit 1" in done.stdout


def test_make_demo_without_containerd_says_why_and_runs_the_agent_only_demo(
    netns: NetnsFactory, tmp_path: Path
) -> None:
    """tests/support/demo_realnode.py (what `make demo` runs) on a machine that cannot run a real
    node: here ``containerd`` is not on PATH (every other command is, by symlink)."""
    for directory in os.environ["PATH"].split(os.pathsep):
        for found in Path(directory).glob("*"):
            link = tmp_path / found.name
            if found.name != "containerd" and not link.exists() and not link.is_symlink():
                link.symlink_to(found)
    up = netns.uplink(v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None)
    env = ["env", f"PATH={tmp_path}"]
    done = subprocess.run(
        ["ip", "netns", "exec", up.node.name, *env, sys.executable, "-m",
         "tests.support.demo_realnode"],
        cwd=ROOT, capture_output=True, text=True, timeout=140, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = done.stdout.splitlines()[:2]
    # `ip netns exec` mounts a /sys of its own, without the cgroup v1 hierarchies: that may be
    # listed too.
    assert first.startswith("local-ccm demo: this machine cannot run a real node; missing: ")
    assert "`containerd` on PATH" in first
    assert second == "Falling back to the agent-only demo."
    assert "The Node is initialised: the agent wrote ExternalIP 192.0.2.10" in done.stdout
