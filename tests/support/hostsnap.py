"""What a real node could change on the machine that runs it, as a comparable snapshot: the
isolation test of the real-node tier (tests/realnode/test_isolation.py) takes one before and
one after a node's whole life and asserts they are equal.

Parsers are pure (tests/unit/support/test_hostsnap.py); :func:`take` reads the machine. Objects
of other test runs that may share the machine (netns-tier namespaces and host links, cpu
cgroups, runc containers: their names say whose they are) are left out, so that a run beside
them compares only what is not theirs; in `make test` the other tiers run beside it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.support import nodeconf as nc
from tests.support.cgroup import MOUNTINFO, cgroup_mounts
from tests.support.netns import run_ip

# Names of other tiers' objects (tests/support/netns.py, cgroup.py, oci.py).
FOREIGN = re.compile(r"^(lcct-|local-ccm-test-|lccm-)|^lv[0-9a-f]{6}[ab]$")
# The kubelet's kernel tunables, and the net.* settings the kubelet, containerd and the CNI
# bridge plugin change in the namespace they run in (forwarding on the bridge's side).
SYSCTLS = (
    *nc.KERNEL_TUNABLES,
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv4/conf/default/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv6/conf/all/forwarding",
    "net/ipv6/conf/all/disable_ipv6",
    "net/bridge/bridge-nf-call-iptables",
    "net/netfilter/nf_conntrack_max",
)
# What the node's processes are called (comm, at most 15 characters).
NODE_COMMANDS = ("containerd", "containerd-shim", "kubelet", "kube-proxy", "pause")
# Where containerd, the CNI plugins and the kubelet write by default.
DEFAULT_PATHS = (
    "/run/containerd",
    "/var/lib/containerd",
    "/opt/containerd",
    "/etc/cni/net.d",
    "/var/lib/cni",
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/usr/libexec/kubernetes",
    "/etc/kubernetes",
)


@dataclass(frozen=True)
class Snapshot:
    links: frozenset[str]
    namespaces: frozenset[str]
    mounts: frozenset[tuple[str, str, str]]  # (mount point, file system type, source)
    cgroups: frozenset[str]  # <hierarchy root>/<top-level directory>
    sysctls: Mapping[str, str]
    processes: Mapping[str, int]  # comm -> how many
    paths: frozenset[str]  # which of DEFAULT_PATHS exist


def is_foreign(name: str) -> bool:
    return FOREIGN.search(name.rsplit("/", 1)[-1]) is not None


def link_names(ip_json: str) -> frozenset[str]:
    """``ip -j link`` output -> interface names (without other runs' host links)."""
    return frozenset(n for link in json.loads(ip_json or "[]")
                     if not is_foreign(n := link["ifname"]))  # fmt: skip


def namespace_names(netns_list: str) -> frozenset[str]:
    return frozenset(n for line in netns_list.splitlines()
                     if (n := line.split()[0]) and not is_foreign(n))  # fmt: skip


def mounts(mountinfo: str) -> frozenset[tuple[str, str, str]]:
    """(mount point, type, source) of every mount; mount ids are left out (they are
    reassigned), and so are other runs' ``/run/netns/<name>`` mounts."""
    found = set()
    for line in mountinfo.splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) > 4 and len(rest) > 1 and not is_foreign(fields[4]):
            found.add((fields[4], rest[0], rest[1]))
    return frozenset(found)


def processes(comms: Mapping[int, str]) -> dict[str, int]:
    """How many processes of each of NODE_COMMANDS there are."""
    counts = dict.fromkeys(NODE_COMMANDS, 0)
    for comm in comms.values():
        if comm in counts:
            counts[comm] += 1
    return counts


# ------------------------------------------------------------------ adapter
def _cgroup_tops(mountinfo: str) -> frozenset[str]:
    roots = [m.point for m in cgroup_mounts(mountinfo)]
    return frozenset(str(d) for root in roots for d in root.iterdir()
                     if d.is_dir() and not is_foreign(d.name))  # fmt: skip


def _comms() -> dict[int, str]:
    found = {}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            found[int(comm.parent.name)] = comm.read_text().strip()
        except OSError:
            continue  # exited meanwhile
    return found


def processes_in_cgroup(name: str) -> dict[str, int]:
    """How many processes of each of NODE_COMMANDS sit in the cgroup `name` (any hierarchy):
    a node's own, whatever other nodes or a previous test's exiting ones do."""
    inside = {}
    for pid, comm in _comms().items():
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue  # exited meanwhile
        # the path below the hierarchy's root, which may itself sit below the test's own
        if any(f"/{name}/" in line.split(":", 2)[-1] + "/" for line in lines):
            inside[pid] = comm
    return processes(inside)


def _sysctl(key: str) -> str:
    try:
        return (Path("/proc/sys") / key).read_text().strip()
    except OSError:
        return "<absent>"


def take() -> Snapshot:
    """The machine as the test process sees it (its network namespace, its mount namespace)."""
    mountinfo = MOUNTINFO.read_text()
    return Snapshot(
        links=link_names(run_ip("-j", "link", "show")),
        namespaces=namespace_names(run_ip("netns", "list")),
        mounts=mounts(mountinfo),
        cgroups=_cgroup_tops(mountinfo),
        sysctls={k: _sysctl(k) for k in SYSCTLS},
        processes=processes(_comms()),
        paths=frozenset(p for p in DEFAULT_PATHS if Path(p).exists()),
    )


def prime_netns_dir() -> None:
    """The first ``ip netns add`` on a machine turns /run/netns into a mount point, for good:
    do that before a snapshot so it is not counted as the node's doing."""
    name = f"{nc.PREFIX}-{os.getpid()}-prime"
    run_ip("netns", "add", name)
    run_ip("netns", "del", name)


def differences(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """Per field: what appeared and what went (or the two mappings)."""
    found: dict[str, Any] = {}
    for key, old in asdict(before).items():
        new = asdict(after)[key]
        if old == new:
            continue
        if isinstance(old, frozenset | set):
            found[key] = {"appeared": sorted(new - old), "went": sorted(old - new)}
        else:
            found[key] = {"before": old, "after": new}
    return found
