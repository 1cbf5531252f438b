"""The isolation test's snapshot parsers (tests/support/hostsnap.py): what counts, and what of
other test runs sharing the machine is left out."""

from __future__ import annotations

import json

from tests.support import hostsnap

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
40 22 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
51 22 0:4 net:[4026532301] /run/netns/lcct-77-1 rw - nsfs nsfs rw
52 22 0:4 net:[4026532302] /run/netns/lcrn-77-1 rw - nsfs nsfs rw
"""


def test_mounts_are_compared_without_ids_and_without_other_runs_namespaces() -> None:
    found = hostsnap.mounts(MOUNTINFO)
    assert ("/", "ext4", "/dev/vda") in found
    assert ("/run/netns/lcrn-77-1", "nsfs", "nsfs") in found  # a node's: counted
    assert not [m for m in found if "lcct-" in m[0]]
    renumbered = MOUNTINFO.replace("22 1 0:21", "99 1 0:21")
    assert hostsnap.mounts(renumbered) == found


def test_links_and_namespaces_of_other_runs_are_left_out() -> None:
    links = [{"ifname": n} for n in ("lo", "lv0a1b2ca", "eth0", "lcrn-1-1")]
    assert hostsnap.link_names(json.dumps(links)) == {"lo", "eth0", "lcrn-1-1"}
    listing = "lcct-5-1 (id: 3)\nlcrn-9-2\nlcrn-9-2-gw (id: 4)\ncni-1234\n"
    assert hostsnap.namespace_names(listing) == {"lcrn-9-2", "lcrn-9-2-gw", "cni-1234"}


def test_foreign_names_are_recognised_by_their_last_path_part() -> None:
    assert hostsnap.is_foreign("/sys/fs/cgroup/cpu/local-ccm-test-12-abcdef")
    assert hostsnap.is_foreign("/sys/fs/cgroup/memory/lccm-0a1b2c3d")
    assert not hostsnap.is_foreign("/sys/fs/cgroup/memory/lcrn-12-1")
    assert not hostsnap.is_foreign("/sys/fs/cgroup/memory/kubepods")


def test_node_processes_are_counted_by_command_name() -> None:
    comms = {1: "bash", 2: "containerd", 3: "containerd-shim", 4: "pause", 5: "pause",
             6: "kube-proxy"}  # fmt: skip
    assert hostsnap.processes(comms) == {
        "containerd": 1, "containerd-shim": 1, "kubelet": 0, "kube-proxy": 1, "pause": 2,
    }  # fmt: skip
