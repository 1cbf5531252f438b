"""A throw-away cpu cgroup with a CFS quota, to run one process under a Kubernetes CPU limit
(D13: the original chart's ``limits.cpu: 100m``, which the kubelet turns into
a CFS quota of 10 000 µs per 100 000 µs period).

Works on cgroup v1 (the ``cpu`` controller mounted on its own hierarchy: ``cpu.cfs_quota_us``,
``cpu.cfs_period_us``) and on cgroup v2 (``cpu.max``): the kernel binds each controller to one
hierarchy, so the v1 ``cpu`` mount wins when there is one, else the v2 mount that offers
``cpu``. The cgroup is created under the hierarchy's root and removed on exit, also when the
test fails (leftover processes are moved back to the root first).

A process joins it through an argv prefix, ``sh -c 'echo $$ > <cg>/cgroup.procs && exec "$@"'
sh <argv...>``: the shell joins and then execs, so the pid the caller holds is the confined
process itself and everything it execs or forks stays inside.

The parsers and the quota arithmetic are pure (tests/unit/test_cgroup.py); :class:`CpuCgroup`
and :func:`cpu_cgroup` are the adapter; an agent joins through
:attr:`~tests.support.agent_process.AgentProcess.prefix`. The last section holds what D13's
test and bench share about that agent (readiness timing, A15's steady state, memory).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from local_ccm.kube.client import Client
from tests.support.agent_process import HEALTH_PORT, AgentProcess
from tests.support.agent_scenarios import initialised, reasons
from tests.support.waiting import eventually

A15_FLAGS = ("--reconcile-interval=1s", "--settle-time=1s", "--resync-interval=10m", "--v=2")
STEADY_NOOP_PASSES = 5  # reconcile ticks that changed nothing: the agent idles as in A15
PERIOD_US = 100_000  # the kubelet's CFS period (--cpu-cfs-quota-period default, 100 ms)
MIN_QUOTA_US = 1_000  # the kubelet's floor for a quota (pkg/kubelet/cm MilliCPUToQuota)
MOUNTINFO = Path("/proc/self/mountinfo")
RMDIR_TRIES = 50  # an exiting task leaves the cgroup a moment after its parent saw it exit
RMDIR_PAUSE = 0.02


# ------------------------------------------------------------------ pure parts
@dataclass(frozen=True)
class Mount:
    """One cgroup file system mount: ``point`` shows the hierarchy's ``subtree``."""

    fstype: str
    point: Path
    subtree: str
    options: frozenset[str]


@dataclass(frozen=True)
class Hierarchy:
    """Where the cpu controller lives: cgroup ``version`` 1 or 2, mounted at ``root``, which
    shows the hierarchy's ``subtree`` (``/`` unless a container bind-mounted a part of it)."""

    version: int
    root: Path
    subtree: str = "/"


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup_mounts(mountinfo: str) -> list[Mount]:
    """Every cgroup and cgroup2 mount in a ``/proc/<pid>/mountinfo`` text, in order."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(rest[2].split(","))
        found.append(Mount(rest[0], Path(_unescape(fields[4])), _unescape(fields[3]), options))
    return found


def v1_cpu_hierarchy(mountinfo: str) -> Hierarchy | None:
    """The v1 hierarchy carrying the ``cpu`` controller, if any."""
    for mount in cgroup_mounts(mountinfo):
        if mount.fstype == "cgroup" and "cpu" in mount.options:
            return Hierarchy(1, mount.point, mount.subtree)
    return None


def v2_hierarchies(mountinfo: str) -> list[Hierarchy]:
    mounts = cgroup_mounts(mountinfo)
    return [Hierarchy(2, m.point, m.subtree) for m in mounts if m.fstype == "cgroup2"]


def quota_us(millicores: int, period_us: int = PERIOD_US) -> int:
    """The CFS quota a kubelet sets for ``limits.cpu: <millicores>m``."""
    return max(MIN_QUOTA_US, millicores * period_us // 1000)


def quota_files(
    version: int, millicores: int | None, period_us: int = PERIOD_US
) -> list[tuple[str, str]]:
    """(file, content) to write, in order; ``millicores=None`` means no limit."""
    if version == 1:
        quota = "-1" if millicores is None else str(quota_us(millicores, period_us))
        return [("cpu.cfs_period_us", str(period_us)), ("cpu.cfs_quota_us", quota)]
    quota = "max" if millicores is None else str(quota_us(millicores, period_us))
    return [("cpu.max", f"{quota} {period_us}")]


def parse_cpu_stat(text: str) -> dict[str, int]:
    """``cpu.stat`` (both versions have ``nr_periods`` and ``nr_throttled``)."""
    pairs = (line.split() for line in text.splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].lstrip("-").isdigit()}


def cgroup_of(proc_cgroup: str, version: int) -> str | None:
    """The cpu cgroup path in a ``/proc/<pid>/cgroup`` text (v1: the line listing ``cpu``
    among its controllers; v2: the ``0::`` line)."""
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == 2 and number == "0" and controllers == "":
            return path
        if version == 1 and "cpu" in controllers.split(","):
            return path
    return None


def join_prefix(procs_file: Path) -> tuple[str, ...]:
    """argv prefix: join the cgroup, then exec the rest of the argv (same pid)."""
    script = f'echo $$ > {shlex.quote(str(procs_file))} && exec "$@"'
    return ("sh", "-c", script, "sh")


# ------------------------------------------------------------------ adapter
def detect_cpu_hierarchy(mountinfo: str | None = None) -> Hierarchy:
    """The hierarchy whose cgroups can be given a CPU quota on this machine."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    if (v1 := v1_cpu_hierarchy(text)) is not None:
        return v1
    for v2 in v2_hierarchies(text):
        if "cpu" in (v2.root / "cgroup.controllers").read_text().split():
            return v2
    raise RuntimeError("no cgroup hierarchy offers the cpu controller")


def _enable_v2_cpu(root: Path) -> None:
    """Children of the v2 root get ``cpu.max`` only once the root delegates ``cpu``."""
    control = root / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")


@dataclass(frozen=True)
class CpuCgroup:
    """One cgroup at ``path`` of ``hierarchy``."""

    hierarchy: Hierarchy
    path: Path

    @property
    def prefix(self) -> tuple[str, ...]:
        """argv prefix that starts a command inside this cgroup."""
        return join_prefix(self.path / "cgroup.procs")

    @property
    def relative(self) -> str:
        """The path as ``/proc/<pid>/cgroup`` names it."""
        return str(Path(self.hierarchy.subtree) / self.path.relative_to(self.hierarchy.root))

    def procs(self) -> list[int]:
        return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]

    def stat(self) -> dict[str, int]:
        return parse_cpu_stat((self.path / "cpu.stat").read_text())

    def holds(self, pid: int) -> bool:
        """``/proc/<pid>/cgroup`` names this cgroup for the cpu controller."""
        text = Path(f"/proc/{pid}/cgroup").read_text()
        return cgroup_of(text, self.hierarchy.version) == self.relative

    def remove(self) -> None:
        """Move any leftover process back to the root, then rmdir (retried while busy)."""
        with contextlib.suppress(FileNotFoundError):
            for pid in self.procs():
                with contextlib.suppress(OSError):  # it may exit meanwhile
                    (self.hierarchy.root / "cgroup.procs").write_text(str(pid))
        for _ in range(RMDIR_TRIES):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(RMDIR_PAUSE)
        self.path.rmdir()  # the last try raises what is wrong


@contextlib.contextmanager
def cpu_cgroup(millicores: int | None, *, name: str = "local-ccm-test") -> Iterator[CpuCgroup]:
    """A fresh cpu cgroup limited to ``millicores`` (None: unlimited), removed on exit."""
    hierarchy = detect_cpu_hierarchy()
    if hierarchy.version == 2:
        _enable_v2_cpu(hierarchy.root)
    path = hierarchy.root / f"{name}-{os.getpid()}-{secrets.token_hex(3)}"
    path.mkdir()
    group = CpuCgroup(hierarchy, path)
    try:
        for file, content in quota_files(hierarchy.version, millicores):
            (path / file).write_text(content)
        yield group
    finally:
        group.remove()


# ------------------------------------------------------------------ the agent inside one (D13)
def readyz_status(agent: AgentProcess) -> int | None:
    """``/readyz``'s status, or None while nothing listens (or answers) yet."""
    try:
        return agent.http_get(HEALTH_PORT, "/readyz", timeout=2.0).status
    except (OSError, ValueError, IndexError):  # refused, reset, or no status line yet
        return None


def seconds_to_ready(agent: AgentProcess, *, timeout: float, interval: float) -> float:
    """Start ``agent`` and poll ``/readyz`` every ``interval`` s: seconds from just before the
    spawn to the first 200. Raises AssertionError on a timeout or an early exit."""
    started = time.monotonic()
    agent.start()
    while (elapsed := time.monotonic() - started) < timeout:
        if readyz_status(agent) == 200:
            return time.monotonic() - started
        if agent.exited() is not None:
            raise AssertionError(f"the agent exited with {agent.exited()}:\n{agent.log()}")
        time.sleep(interval)
    raise AssertionError(f"/readyz not 200 within {timeout} s ({elapsed:.1f} s):\n{agent.log()}")


def steady(agent: AgentProcess, kube: Client, node: str, timeout: float = 30.0) -> None:
    """Until the start-up work is done (taint removed, both Events sent) and
    ``STEADY_NOOP_PASSES`` more no-op passes have run: the idle agent of A15 (run it with
    ``A15_FLAGS``, whose 1 s reconcile interval makes the ticks)."""
    eventually(lambda: initialised(kube, node), timeout=timeout, message="initialised")
    wanted = {"AddressesUpdated", "NodeInitialized"}
    eventually(lambda: wanted <= reasons(kube, node), timeout=timeout, message=f"{wanted}")
    base = agent.metric_sum("local_ccm_agent_passes_total", outcome="noop")
    eventually(
        lambda: (
            agent.metric_sum("local_ccm_agent_passes_total", outcome="noop")
            >= base + STEADY_NOOP_PASSES
        ),
        timeout=timeout,
        interval=0.5,
        message=f"{STEADY_NOOP_PASSES} no-op passes",
    )


def vm_mib(agent: AgentProcess, field: str = "VmRSS") -> float:
    """``VmRSS`` (or ``VmHWM``) of the agent process, MiB (``/proc/<pid>/status``: ``N kB``)."""
    return int(agent.proc_status()[field].split()[0]) / 1024
