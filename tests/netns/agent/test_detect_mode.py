"""`local-ccm detect` as a whole process inside a test namespace, with no cluster at all
(acceptance A27, pattern 1 in docs/testing.md).

Route lookups send nothing; every address is from a documentation range, and 8.8.8.8 is only
ever looked up inside a test namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.netns.agent.test_machine_facts import DELL_R650, SERIAL
from tests.support.netns import Namespace, NetnsFactory

LOCAL_CCM = Path(sys.executable).with_name("local-ccm")
V6_TARGET = "2001:4860:4860::8888"


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """No NODE_NAME, no in-cluster variables, no kubeconfig: a host without a cluster."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}


def run_in(ns: Namespace, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "netns", "exec", ns.name, str(LOCAL_CCM), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(env), check=False)


def node_with_two_links(netns: NetnsFactory) -> Namespace:
    """eth0 198.51.100.10/24 with the default route, eth1 192.0.2.10/24 plus a /32 VIP, and a
    CNI device cilium_host with a /32; IPv6 is off."""
    up = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    node = up.node
    node.add_veth("eth1", "eth1p")
    node.add_address("eth1", "192.0.2.10/24")
    node.add_address("eth1", "192.0.2.100/32")
    node.add_veth("cilium_host", "cilium_net")
    node.add_address("cilium_host", "203.0.113.99/32")
    return node


def test_detect_text_prints_detections_and_candidates(
    netns: NetnsFactory, clean_env: dict[str, str]
) -> None:
    node = node_with_two_links(netns)
    done = run_in(node, clean_env, "detect", "--internal-ip-target=192.0.2.1",
                  "--external-ip-target=8.8.8.8")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[:6] == [
        "TYPE        FAMILY  ADDRESS        SOURCE              DETAIL",
        "InternalIP  ipv4    192.0.2.10     route 192.0.2.1     dev eth1",
        "InternalIP  ipv6    -              disabled",
        "ExternalIP  ipv4    198.51.100.10  route 8.8.8.8       dev eth0",
        "ExternalIP  ipv6    -              disabled",
        "CANDIDATES",
    ]
    rows = [" ".join(line.split()) for line in lines[6:]]
    assert "lo 127.0.0.1/8 excluded: interface matches lo" in rows
    assert "eth0 198.51.100.10/24 ok" in rows
    assert "eth1 192.0.2.10/24 ok" in rows
    assert "eth1 192.0.2.100/32 excluded: vip" in rows
    assert "cilium_host 203.0.113.99/32 excluded: interface matches cilium_*" in rows


def test_detect_json_has_the_same_data(netns: NetnsFactory, clean_env: dict[str, str]) -> None:
    node = node_with_two_links(netns)
    done = run_in(node, clean_env, "detect", "--internal-ip-target=192.0.2.1", "--output=json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["plan"] is None
    found = {(d["type"], d["family"]): d for d in document["detections"]}
    assert found["InternalIP", "ipv4"]["address"] == "192.0.2.10"
    assert found["InternalIP", "ipv4"]["interface"] == "eth1"
    assert found["ExternalIP", "ipv4"]["address"] == "198.51.100.10"
    assert found["ExternalIP", "ipv4"]["target"] == "8.8.8.8"
    assert found["ExternalIP", "ipv6"]["result"] == "disabled"
    statuses = {c["address"]: c["status"] for c in document["candidates"]}
    assert statuses["192.0.2.100/32"] == "excluded: vip"
    assert statuses["203.0.113.99/32"] == "excluded: interface matches cilium_*"


def test_detect_dual_stack_routes(netns: NetnsFactory, clean_env: dict[str, str]) -> None:
    up = netns.uplink()  # eth0 192.0.2.10/24 and 2001:db8:0:1::10/64, default routes
    done = run_in(up.node, clean_env, "detect", f"--external-ip-target=8.8.8.8,{V6_TARGET}",
                  "--output=json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)["detections"]
    external = {d["family"]: d.get("address") for d in found if d["type"] == "ExternalIP"}
    assert external == {"ipv4": "192.0.2.10", "ipv6": "2001:db8:0:1::10"}


def test_detect_without_default_route_explains_the_missing_external_ip(
    netns: NetnsFactory, clean_env: dict[str, str]
) -> None:
    up = netns.uplink(v6=None, default_routes=False)
    done = run_in(up.node, clean_env, "detect")  # the original's default: 8.8.8.8
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[3] == (
        "ExternalIP  ipv4    -             failed              no route to 8.8.8.8 (ENETUNREACH)"
    )
    as_json = run_in(up.node, clean_env, "detect", "--output=json")
    assert as_json.returncode == 1
    external = json.loads(as_json.stdout)["detections"][2]
    assert external["result"] == "failed"
    assert external["reason"] == "no_route"
    assert external["detail"] == "no route to 8.8.8.8: Network is unreachable (ENETUNREACH)"


def test_a27_detect_exits_1_for_an_unroutable_target(
    netns: NetnsFactory, clean_env: dict[str, str]
) -> None:
    up = netns.uplink(v6=None, default_routes=False)
    args = ("detect", "--internal-ip-target=192.0.2.1", "--external-ip-target=", "--output=json")
    assert run_in(up.node, clean_env, *args).returncode == 0
    unroutable = ("detect", "--internal-ip-target=203.0.113.1", "--external-ip-target=")
    assert run_in(up.node, clean_env, *unroutable).returncode == 1


def test_detect_with_node_name_but_no_credentials_says_why_there_is_no_plan(
    netns: NetnsFactory, clean_env: dict[str, str]
) -> None:
    up = netns.uplink(v6=None)
    done = run_in(up.node, {**clean_env, "NODE_NAME": "n1"}, "detect")
    assert done.returncode == 0, done.stderr
    plan = done.stdout.split("PLAN for node n1\n", 1)[1]
    assert plan.startswith("  not available: no Kubernetes credentials: not in a cluster")


def test_invalid_command_line_exits_2_without_traceback(
    netns: NetnsFactory, clean_env: dict[str, str]
) -> None:
    ns = netns(disable_ipv6=True)
    done = run_in(ns, clean_env, "--remove-taint", "false", "--node-name=n1", "--kubeconfig=/x")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        'unexpected argument "false" (use --remove-taint=false)',
        "invalid flag --kubeconfig: cannot read kubeconfig /x: No such file or directory",
        "run 'local-ccm --help' for usage",
    ]


def test_version_from_the_real_binary(netns: NetnsFactory, clean_env: dict[str, str]) -> None:
    done = run_in(netns(disable_ipv6=True), clean_env, "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("local-ccm ")


def test_detect_shows_facts_rules_and_metadata_labels_from_dmi(
    netns: NetnsFactory, clean_env: dict[str, str], tmp_path: Path
) -> None:
    """A Dell R650's DMI tree mounted over /sys/class in a private mount namespace."""
    node = node_with_two_links(netns)
    dmi = tmp_path / "dmi"
    dmi.mkdir()
    for name, text in DELL_R650.items():
        (dmi / name).write_text(text)
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: rack-2, match: {addresses: [192.0.2.0/24]}, zone: r2}\n")
    script = ('mount -t tmpfs lcct-dmi /sys/class && mkdir -p /sys/class/dmi/id && '
              'cp -a "$1"/. /sys/class/dmi/id/ && shift && exec "$@"')  # fmt: skip
    cmd = ["ip", "netns", "exec", node.name, "unshare", "--mount", "--propagation", "private",
           "sh", "-c", script, "sh", str(dmi), str(LOCAL_CCM), "detect", "--node-name=fra1-r2-n1",
           "--internal-ip-target=192.0.2.1", "--external-ip-target=8.8.8.8",
           f"--metadata-rules={rules}"]  # fmt: skip
    shown = subprocess.run(cmd, capture_output=True, text=True, env=dict(clean_env), check=False)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "METADATA" in out
    assert f"  rules: {rules}" in out
    assert "  fact dmi.productName = PowerEdge R650" in out
    assert "  matching rules: rack-2" in out
    assert "  label topology.kubernetes.io/zone=r2  (rule rack-2)" in out
    assert "  label node.kubernetes.io/instance-type=PowerEdge-R650  (rule (default" in out
    assert SERIAL not in out
    done = subprocess.run([*cmd, "--output=json"], capture_output=True, text=True,
                          env=dict(clean_env), check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    metadata = json.loads(done.stdout)["metadata"]
    assert metadata["labels"]["node.kubernetes.io/instance-type"]["value"] == "PowerEdge-R650"
    assert metadata["matchingRules"] == ["rack-2"]
    assert metadata["node"] is None  # no cluster: nothing read, nothing planned
