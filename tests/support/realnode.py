"""A real node: the kubelet and Debian's containerd, runc and CNI plugins, isolated from the
machine that runs the tests (docs/testing.md, "The real-node tier").

One :class:`RealNode` is, on the host, only things named ``lcrn-<driver pid>-<n>``
(tests/support/nodeconf.py): a node network namespace whose ``eth0`` is one end of a veth
to a gateway namespace that routes nowhere; a cgroup of that name below the root of every
cgroup hierarchy (the kubelet's cgroupRoot); a node directory with the configs; and one process
tree: ``setpriv --pdeathsig KILL nsenter --net=… unshare --mount --pid --fork --kill-child
bash init.sh``, whose PID 1 mounts tmpfs over /run, /var/lib and /var/log, pins the kernel
tunables the kubelet would write, and runs containerd and the kubelet. The apiserver on the
host's 127.0.0.1 is reached through a loopback relay inside the node namespace.

:meth:`RealNode.stop` sends SIGTERM to PID 1 and removes the rest; :func:`sweep_stale`
removes what a killed driver left (its pid is dead): processes, namespaces, cgroups, dirs.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Interface, IPv4Network
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import nodeconf as nc
from tests.support import resources as r
from tests.support.cgroup import MOUNTINFO, cgroup_mounts
from tests.support.netns import IpCommandError, Namespace, pid_alive, run_ip
from tests.support.pause import PauseImage
from tests.support.processes import Child, StartupError, spawn, tail
from tests.support.relay import LoopbackRelay

log = logging.getLogger(__name__)
NODE_BASE = Path(tempfile.gettempdir())
READY_TIMEOUT = 180.0  # node Ready took 10-20 s on a loaded 2-core machine
STOP_GRACE = 30.0
GONE_TIMEOUT = 15.0  # for killed processes to leave their cgroups
_NODE_DIR_IN_ARGV = re.compile(rf"/{nc.PREFIX}-(\d+)-\d+")


@dataclass(frozen=True)
class NodeSpec:
    """What one node runs with. ``kubeconfig`` authenticates as ``system:node:<name>`` and
    names ``https://127.0.0.1:<api_port>``, which the relay serves inside the node."""

    name: str
    api_port: int
    kubeconfig: Path
    client_ca: Path
    kubelet: Path
    pause: PauseImage
    logs: Path
    images: tuple[nc.ImageImport, ...] = ()
    node_ip: bool = False
    server_tls_bootstrap: bool = False
    # eth0's address; a second node of a module takes another one of the /25, so that no
    # node's probe of it is answered by its own eth0.
    v4: IPv4Interface = nc.NODE_V4
    # False: no CNI network at start (the kubelet reports NetworkReady=false, only hostNetwork
    # Pods run) until :meth:`RealNode.write_cni` writes one.
    cni: bool = True
    # True: :meth:`RealNode.stop_kubelet` and :meth:`RealNode.start_kubelet` work (the node's
    # PID 1 traps SIGUSR1 and SIGUSR2: nodeconf.init_script).
    restartable_kubelet: bool = False
    # kube-proxy's binary and a kubeconfig for it (``system:kube-proxy``): PID 1 runs it beside
    # the kubelet (nodeconf.kube_proxy_config); None: no kube-proxy, the tier's usual node.
    kube_proxy: Path | None = None
    kube_proxy_kubeconfig: Path | None = None


def is_ready(node: Mapping[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def has_conditions(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" for c in node.get("status", {}).get("conditions") or [])


def hierarchy_roots(mountinfo: str) -> list[Path]:
    """The mount point of every cgroup hierarchy (v1 ones and a hybrid or pure v2 one)."""
    return [m.point for m in cgroup_mounts(mountinfo)]


@dataclass
class RealNode:
    spec: NodeSpec
    names: nc.NodeNames
    child: Child | None = None
    relay: LoopbackRelay | None = None
    pid1: int | None = None
    roots: list[Path] = field(default_factory=list)

    @property
    def files(self) -> nc.NodeFiles:
        return nc.NodeFiles(self.names.node_dir, self.spec.logs)

    @property
    def address(self) -> str:
        return str(self.spec.v4.ip)

    @property
    def gateway(self) -> str:
        return str(nc.GATEWAY_V4.ip)

    # ---------------------------------------------------------------- start
    def start(self) -> None:
        """Build everything and start PID 1; the kubelet registers on its own afterwards."""
        self._write_files()
        self._network()
        self._cgroups()
        self.relay = LoopbackRelay(self.names.node_ns, ("127.0.0.1", self.spec.api_port))
        argv = nc.node_argv(self.names.node_ns, self.files.init_script)
        self.child = spawn("realnode", argv, self.spec.logs / "node.log", die_with_parent=False)
        self.pid1 = _first_child(self.child.pid, deadline=time.monotonic() + 10)

    def _write_files(self) -> None:
        files, spec = self.files, self.spec
        for d in (files.node_dir, files.tunables_dir, files.cni_dir, spec.logs / "pods"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path, text in nc.tunable_files(files).items():
            path.write_text(text)
        shutil.copyfile(spec.kubeconfig, files.kubeconfig)
        shutil.copyfile(spec.client_ca, files.client_ca)
        files.containerd_config.write_text(nc.containerd_config(files, spec.pause.name))
        if spec.cni:
            self.write_cni(nc.POD_SUBNET)
        files.kubelet_config.write_text(nc.kubelet_config(
            files, cgroup_root=self.names.cgroup, server_tls_bootstrap=spec.server_tls_bootstrap
        ))  # fmt: skip
        kubelet = nc.kubelet_args(spec.kubelet, files, node_name=spec.name,
                                  node_ip=self.address if spec.node_ip else None)  # fmt: skip
        images = (nc.ImageImport(spec.pause.archive), *spec.images)
        proxy: list[str] = []
        if spec.kube_proxy is not None:
            if spec.kube_proxy_kubeconfig is None:
                raise ValueError(f"node {spec.name}: kube-proxy without a kubeconfig")
            shutil.copyfile(spec.kube_proxy_kubeconfig, files.kube_proxy_kubeconfig)
            files.kube_proxy_config.write_text(nc.kube_proxy_config(
                files, node_name=spec.name, cluster_cidr=nc.POD_SUBNET
            ))  # fmt: skip
            proxy = nc.kube_proxy_args(spec.kube_proxy, files)
        files.init_script.write_text(nc.init_script(
            files, images=images, kubelet_argv=kubelet, restartable=spec.restartable_kubelet,
            kube_proxy_argv=proxy,
        ))  # fmt: skip

    def write_cni(self, subnet: IPv4Network) -> None:
        """The node's CNI network with host-local addresses from ``subnet``, written whole:
        containerd watches its conf_dir and would read a half-written file."""
        conflist = self.files.cni_dir / "10-lcrn.conflist"
        partial = conflist.with_suffix(".partial")
        partial.write_text(nc.cni_conflist(subnet))
        partial.rename(conflist)

    def trust_registry(self, host: str, hosts_toml: str) -> None:
        """Tell the node's containerd how to reach the registry at ``host`` (read at each
        pull: no restart)."""
        directory = self.files.registry_hosts / host
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(hosts_toml)

    def _network(self) -> None:
        node, gateway = Namespace(self.names.node_ns), Namespace(self.names.gateway_ns)
        for ns in (node, gateway):
            run_ip("netns", "add", ns.name)
            # IPv4 only, before any link exists: no IPv6 address, route or packet appears.
            ns.sysctl("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        run_ip("link", "add", "name", "eth0", "netns", node.name, "type", "veth",
               "peer", "name", "gw0", "netns", gateway.name)  # fmt: skip
        gateway.batch("link set lo up", "link set gw0 up", f"addr add {nc.GATEWAY_V4} dev gw0")
        node.batch("link set lo up", "link set eth0 up", f"addr add {self.spec.v4} dev eth0",
                   f"route add default via {self.gateway} dev eth0")  # fmt: skip

    def _cgroups(self) -> None:
        self.roots = hierarchy_roots(MOUNTINFO.read_text())
        for root in self.roots:
            path = root / self.names.cgroup
            path.mkdir()
            for name in ("cpuset.cpus", "cpuset.mems"):  # v1 cpuset: empty until copied
                if (root / name).is_file():
                    (path / name).write_text((root / name).read_text())

    # ---------------------------------------------------------------- running
    def running(self) -> bool:
        return self.child is not None and self.child.exited() is None

    def wait_ready(self, kube: Client, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        """The Node object once its Ready condition is True; StartupError (with the logs) if
        the node's process tree ends or the deadline passes first."""
        return self._wait_node(kube, is_ready, "Ready", timeout)

    def wait_registered(self, kube: Client, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        """The Node object once the kubelet has registered it and reported its conditions
        (a node without a CNI network never becomes Ready)."""
        return self._wait_node(kube, has_conditions, "registered", timeout)

    def _wait_node(
        self, kube: Client, done: Callable[[Mapping[str, Any]], bool], what: str, timeout: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise StartupError(f"the node ended ({self._exit()}) before {what}\n"
                                   f"{self.tails()}")  # fmt: skip
            with contextlib.suppress(ApiError):
                node = kube.get(r.NODES, self.spec.name)
                if done(node):
                    return node
            if time.monotonic() >= deadline:
                raise StartupError(f"Node {self.spec.name} not {what} in {timeout:.0f} s\n"
                                   f"{self.tails()}")  # fmt: skip
            time.sleep(0.5)

    def _exit(self) -> str:
        return f"exit code {self.child.exited() if self.child else None}"

    def tails(self, lines: int = 30) -> str:
        logs = ("node.log", "containerd.log", "kubelet.log",
                *(("kube-proxy.log",) if self.spec.kube_proxy else ()))  # fmt: skip
        return "\n".join(f"--- {n}\n{tail(self.spec.logs / n, lines)}" for n in logs)

    def processes(self) -> list[int]:
        """Every process of the node (the unshare process and all its descendants)."""
        return descendants(self.child.pid) if self.running() and self.child else []

    # ---------------------------------------------------------------- the kubelet alone
    def kubelet_pids(self) -> list[int]:
        """The node's kubelet processes (none while it is stopped)."""
        return [p for p in self.processes() if _comm(p) == "kubelet"]

    def stop_kubelet(self, timeout: float = STOP_GRACE) -> None:
        """Stop the kubelet and wait until it has exited; containerd and the Pods' containers
        run on. Needs ``spec.restartable_kubelet``."""
        self._signal_pid1(signal.SIGUSR1)
        self._wait_kubelet(lambda pids: not pids, "stopped", timeout)

    def start_kubelet(self, timeout: float = 10.0) -> None:
        """Start the kubelet again (it registers its Node if there is none); returns once the
        process runs, not once the Node is there. Needs ``spec.restartable_kubelet``."""
        self._signal_pid1(signal.SIGUSR2)
        self._wait_kubelet(bool, "started", timeout)

    def _signal_pid1(self, signum: signal.Signals) -> None:
        if not self.spec.restartable_kubelet:
            raise ValueError(f"node {self.spec.name}: its kubelet is not restartable")
        if not self.running() or self.pid1 is None:
            raise StartupError(f"the node ended ({self._exit()})\n{self.tails()}")
        os.kill(self.pid1, signum)

    def _wait_kubelet(self, done: Callable[[list[int]], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done(self.kubelet_pids()):
            if not self.running() or time.monotonic() >= deadline:
                raise StartupError(f"the kubelet of {self.spec.name} not {what} in "
                                   f"{timeout:.0f} s ({self._exit()})\n{self.tails()}")  # fmt: skip
            time.sleep(0.05)

    # ---------------------------------------------------------------- stop
    def stop(self) -> list[str]:
        """SIGTERM to PID 1 (the kubelet, then containerd stop; the kernel kills the rest),
        then the relay, both namespaces, the cgroups and the node directory. Returns what
        could not be removed (never raises)."""
        problems: list[str] = []
        self._stop_tree(problems)
        if self.relay is not None:
            self.relay.close()
        problems += delete_namespaces([self.names.node_ns, self.names.gateway_ns])
        for root in self.roots or hierarchy_roots(MOUNTINFO.read_text()):
            problems += remove_cgroup_tree(root / self.names.cgroup)
        shutil.rmtree(self.names.node_dir, ignore_errors=True)
        if self.names.node_dir.exists():
            problems.append(f"{self.names.node_dir} is still there")
        return problems

    def _stop_tree(self, problems: list[str]) -> None:
        if self.child is None or self.child.exited() is not None:
            return
        if self.pid1 is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid1, signal.SIGTERM)
        try:
            self.child.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            problems.append(f"the node ignored SIGTERM for {STOP_GRACE:.0f} s; killed")
            self.child.proc.kill()  # unshare --kill-child: PID 1 and its namespace go too
            self.child.proc.wait()


# ------------------------------------------------------------------ process helpers
def _first_child(pid: int, *, deadline: float) -> int:
    """The first child of ``pid`` (unshare's fork: the namespace's PID 1, in our numbering)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if found := children.read_text().split():
                return int(found[0])
        time.sleep(0.02)
    raise StartupError(f"pid {pid} forked no PID 1 in time")


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            found[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    return found


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents = _parents()
    tree, changed = {pid}, True
    while changed:
        more = {p for p, pp in parents.items() if pp in tree and p not in tree}
        tree |= more
        changed = bool(more)
    return sorted(tree)


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def rss_kib(pids: list[int]) -> dict[str, int]:
    """VmRSS by command name (``/proc/<pid>/comm``), summed; kernel threads have none."""
    totals: dict[str, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            status = Path(f"/proc/{pid}/status").read_text()
            if found := re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE):
                totals[comm] = totals.get(comm, 0) + int(found.group(1))
    return totals


def _stale(name: str, alive: Callable[[int], bool]) -> bool:
    owner = nc.owner_pid(name)
    return owner is not None and owner != os.getpid() and not alive(owner)


# ------------------------------------------------------------------ removal
def delete_namespaces(names: list[str]) -> list[str]:
    problems = []
    for name in names:
        try:
            run_ip("netns", "del", name)
        except IpCommandError as exc:
            if "No such file" not in str(exc):
                problems.append(str(exc))
    return problems


def remove_cgroup_tree(top: Path, timeout: float = GONE_TIMEOUT) -> list[str]:
    """rmdir ``top`` bottom-up; processes still in it are killed (they belong to a node that
    is gone), and a busy directory is retried until ``timeout``."""
    deadline = time.monotonic() + timeout
    while top.is_dir():
        for path in sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: -len(p.parts)):
            _kill_members(path)
            with contextlib.suppress(FileNotFoundError):
                try:
                    path.rmdir()
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        return [f"rmdir {path}: {exc}"]
        if top.is_dir() and time.monotonic() >= deadline:
            return [f"cgroup {top} still busy after {timeout:.0f} s"]
        if top.is_dir():
            time.sleep(0.1)
    return []


def _kill_members(cgroup: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def sweep_stale(base: Path = NODE_BASE, alive: Callable[[int], bool] = pid_alive) -> list[str]:
    """Remove what nodes of dead drivers left; return what was removed. Processes first (they
    hold the rest), then namespaces, cgroups and node directories."""
    removed = _kill_stale_processes(alive)
    stale_ns = [n.split()[0] for n in run_ip("netns", "list").splitlines()
                if _stale(n.split()[0], alive)]  # fmt: skip
    delete_namespaces(stale_ns)
    removed += [f"netns {n}" for n in stale_ns]
    for root in hierarchy_roots(MOUNTINFO.read_text()):
        for top in sorted(root.glob(f"{nc.PREFIX}-*")):
            if top.is_dir() and _stale(top.name, alive):
                remove_cgroup_tree(top)
                removed.append(f"cgroup {top}")
    for node_dir in sorted(base.glob(f"{nc.PREFIX}-*")):
        if _stale(node_dir.name, alive):
            shutil.rmtree(node_dir, ignore_errors=True)
            removed.append(f"dir {node_dir}")
    if removed:
        log.warning("removed what killed real-node runs left: %s", ", ".join(removed))
    return removed


def _kill_stale_processes(alive: Callable[[int], bool]) -> list[str]:
    """SIGKILL every process whose command line names a dead driver's node (its directory or
    namespace); an unshare among them takes its whole PID namespace along."""
    killed = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            owners = {int(m) for m in _NODE_DIR_IN_ARGV.findall(argv)}
            if owners and all(o != os.getpid() and not alive(o) for o in owners):
                os.kill(int(cmdline.parent.name), signal.SIGKILL)
                killed.append(f"process {cmdline.parent.name} ({argv[:80].strip()})")
    return killed


@contextlib.contextmanager
def real_node(spec: NodeSpec, names: nc.NodeNames) -> Iterator[RealNode]:
    """A started node (not yet Ready: see :meth:`RealNode.wait_ready`), stopped and removed on
    exit; leftovers of killed runs are swept first."""
    sweep_stale(names.base)
    node = RealNode(spec, names)
    try:
        node.start()
        yield node
    except BaseException:
        if problems := node.stop():
            log.error("real node teardown after a failure: %s", "; ".join(problems))
        raise
    if problems := node.stop():
        raise AssertionError("real node teardown: " + "; ".join(problems))
