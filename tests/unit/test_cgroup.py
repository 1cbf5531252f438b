"""The pure parts of tests/support/cgroup.py: finding the cpu controller, the kubelet's quota
arithmetic, the quota files of both cgroup versions, cpu.stat, /proc/<pid>/cgroup and the argv
prefix (D13)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cgroup import (
    Hierarchy,
    cgroup_of,
    detect_cpu_hierarchy,
    join_prefix,
    parse_cpu_stat,
    quota_files,
    quota_us,
    v1_cpu_hierarchy,
    v2_hierarchies,
)

# This machine's layout: v1 controllers each on their own mount, plus a v2 mount without them.
HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
# systemd's classic layout: cpu and cpuacct co-mounted, with an optional field before " - ".
COMOUNTED = (
    "27 25 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
)
# A pure v2 host, and a container seeing a bind-mounted part of a v1 hierarchy.
UNIFIED = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
CONTAINER = "1200 1100 0:29 /docker/abc /sys/fs/cgroup/cpu ro,relatime - cgroup cgroup rw,cpu\n"


def test_v1_cpu_hierarchy_is_the_mount_carrying_cpu_not_cpuset_or_cpuacct() -> None:
    assert v1_cpu_hierarchy(HYBRID) == Hierarchy(1, Path("/sys/fs/cgroup/cpu"), "/")


def test_v1_cpu_hierarchy_found_when_cpu_is_co_mounted_with_cpuacct() -> None:
    assert v1_cpu_hierarchy(COMOUNTED) == Hierarchy(1, Path("/sys/fs/cgroup/cpu,cpuacct"), "/")


def test_v1_cpu_hierarchy_keeps_the_subtree_a_container_mount_shows() -> None:
    found = v1_cpu_hierarchy(CONTAINER)
    assert found == Hierarchy(1, Path("/sys/fs/cgroup/cpu"), "/docker/abc")


def test_a_pure_v2_host_has_no_v1_cpu_and_one_v2_candidate() -> None:
    assert v1_cpu_hierarchy(UNIFIED) is None
    assert v2_hierarchies(UNIFIED) == [Hierarchy(2, Path("/sys/fs/cgroup"), "/")]


def test_detect_prefers_the_v1_cpu_mount_over_a_v2_mount() -> None:
    assert detect_cpu_hierarchy(HYBRID).version == 1


def test_mount_points_with_escaped_spaces_are_unescaped() -> None:
    line = r"5 1 0:9 / /mnt/my\040cgroups rw - cgroup cgroup rw,cpu" + "\n"
    assert v1_cpu_hierarchy(line) == Hierarchy(1, Path("/mnt/my cgroups"), "/")


def test_100m_is_a_quota_of_10000_us_per_100000_us_period() -> None:
    assert quota_us(100) == 10_000
    assert quota_us(1500) == 150_000
    assert quota_us(1) == 1_000  # the kubelet's minimum quota


def test_quota_files_for_v1_set_period_before_quota() -> None:
    assert quota_files(1, 100) == [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "10000")]
    assert quota_files(1, None)[-1] == ("cpu.cfs_quota_us", "-1")


def test_quota_files_for_v2_write_cpu_max() -> None:
    assert quota_files(2, 100) == [("cpu.max", "10000 100000")]
    assert quota_files(2, None) == [("cpu.max", "max 100000")]


def test_cpu_stat_of_both_versions_yields_nr_throttled() -> None:
    v1 = "nr_periods 69\nnr_throttled 63\nthrottled_time 5139190204\n"
    v2 = "usage_usec 812\nnr_periods 5\nnr_throttled 2\nthrottled_usec 901\n"
    assert parse_cpu_stat(v1)["nr_throttled"] == 63
    assert parse_cpu_stat(v2) == {
        "usage_usec": 812,
        "nr_periods": 5,
        "nr_throttled": 2,
        "throttled_usec": 901,
    }


def test_cgroup_of_reads_the_cpu_line_on_v1_and_the_unified_line_on_v2() -> None:
    text = "3:cpuset:/\n2:cpu,cpuacct:/lccm-1\n1:name=systemd:/x\n0::/unified-path\n"
    assert cgroup_of(text, 1) == "/lccm-1"
    assert cgroup_of(text, 2) == "/unified-path"
    assert cgroup_of("3:cpuset:/\n", 1) is None


def test_join_prefix_writes_the_shell_pid_and_execs_the_command_in_place(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup procs"  # a space: the path is quoted
    argv = [*join_prefix(procs), "sh", "-c", "echo $$"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=5)
    assert procs.read_text().strip() == out.stdout.strip()  # one pid: exec, not a child
