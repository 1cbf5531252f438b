"""Joins of a real node in `make bench-compare`: the kubelet registers its Node, the agent's
DaemonSet Pod starts on it and removes the uninitialized taint; ours (`local-ccm`, the
project's image and chart) against the Go original v0.2.1 (its binary packed into an image
here, its own chart).

The node is the real-node tier's (tests/support/realnode.py: kubelet, containerd, runc, its own
namespaces) with a kubelet that can be stopped and started. Both charts are installed once;
each DaemonSet selects the node by ``kubernetes.io/hostname`` only for its own joins (the other
selects a hostname no Node has). One join of ``impl``:

1. **drain**: both DaemonSets select no Node; the DaemonSet controller deletes the Pod of the
   previous join, the kubelet stops its container gracefully, the Pod goes;
2. **leave**: the kubelet stops, the Node is deleted (its Lease goes with it);
3. ``impl``'s DaemonSet selects the node's hostname (the controller has seen it before 4.);
4. **join**: the test's watches open on the Node and on the Pods, the kubelet starts again and
   registers a new Node, tainted, and the rest happens on its own until the taint is gone.

Only one agent can act on the new Node: the other's Pod is gone before the Node exists, and the
Pod watch of the join must show no Pod of the other DaemonSet (the run fails otherwise).
containerd's task events (``ctr events`` on the node's socket, its own time stamps) time the
sandbox and the agent's container; the agent's first log line is read from its CRI log.
tests/bench/join_phases.py turns the records into the timeline (pure).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client, WatchStream
from local_ccm.kube.errors import ApiError, NotFound
from tests.bench import join_phases as jp
from tests.support import nodeconf as nc
from tests.support import resources as r
from tests.support.oci import REPO, binary_image, host_arch
from tests.support.processes import Child, spawn, tail
from tests.support.realnode_chart import NAMESPACE, RELEASE, run_helm
from tests.support.realnode_cluster import Cluster
from tests.support.waiting import eventually

DAEMONSETS = r.Resource("apps", "v1", "daemonsets", "DaemonSet", True)
GO_RELEASE = "go-local-ccm"
# The Go original's chart v0.2.1, as its source tarball has it (the copy D14 installs).
GO_CHART = REPO / "tests" / "integration" / "deploy" / "upstream-charts" / "local-ccm-v0.2.1"
GO_IMAGE_REPOSITORY = "local-ccm.test/go-local-ccm"
GO_BINARY_PATH = "/usr/local/bin/local-ccm"  # the Go chart's `command`
DAEMONSET = {"ours": RELEASE, "go": GO_RELEASE}  # each chart names its DaemonSet after the release
FIELD_MANAGER = "local-ccm-join-bench"
DRAIN_TIMEOUT = 120.0  # ours has terminationGracePeriodSeconds 30; it exits at once on SIGTERM
JOIN_TIMEOUT = 180.0  # a join took 2-6 s on a loaded 2-core machine
REPORT_TIMEOUT = 30.0  # for the kubelet to report the container running after the taint went
WATCH_OPEN_TIMEOUT = 30.0


def go_image(binary: Path, out: Path) -> tuple[nc.ImageImport, tuple[str, str]]:
    """The Go agent's static binary as a one-layer image (the entry point the chart runs),
    tagged with the binary's hash; the archive to import and its (repository, tag)."""
    data = binary.read_bytes()
    tag = hashlib.sha256(data).hexdigest()[:16]
    archive = out / f"go-local-ccm-{tag}.oci.tar"
    name = f"{GO_IMAGE_REPOSITORY}:{tag}"
    archive.write_bytes(binary_image(data, path=GO_BINARY_PATH, name=name, arch=host_arch()))
    return nc.ImageImport(archive), (GO_IMAGE_REPOSITORY, tag)


# ------------------------------------------------------------------ recording
@dataclass
class Recorder:
    """Every event of one watch from ``resource_version`` on, with the wall-clock time the
    test received it; a client of its own (the watch's connection is its own)."""

    kubeconfig: Path
    res: r.Resource
    resource_version: str
    namespace: str | None = None
    field_selector: str | None = None
    events: list[jp.Seen] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _client: Client | None = None
    _stream: WatchStream | None = None
    _thread: threading.Thread | None = None

    def __enter__(self) -> Recorder:
        self._client = Client.from_kubeconfig(self.kubeconfig, field_manager=FIELD_MANAGER)
        self._stream = self._client.watch(
            self.res, namespace=self.namespace, field_selector=self.field_selector,
            resource_version=self.resource_version, timeout_seconds=1800, allow_bookmarks=False,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, name=f"join:{self.res.plural}",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        stream = self._stream
        eventually(lambda: stream.is_open, timeout=WATCH_OPEN_TIMEOUT,
                   message=f"the {self.res.plural} watch opened")  # fmt: skip
        return self

    def _read(self) -> None:
        assert self._stream is not None
        with contextlib.suppress(ApiError, OSError):  # closed by __exit__
            for event in self._stream:
                with self._changed:
                    self.events.append(jp.Seen(time.time(), event.type, event.object))
                    self._changed.notify_all()

    def wait_for(self, match: Callable[[jp.Seen], bool], timeout: float, what: str) -> jp.Seen:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if found := next((e for e in self.events if match(e)), None):
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not seen within {timeout:.0f} s: {what}")
                self._changed.wait(left)

    def snapshot(self) -> list[jp.Seen]:
        with self._changed:
            return list(self.events)

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._client is not None:
            self._client.close()


@contextlib.contextmanager
def task_events(cluster: Cluster, log: Path) -> Iterator[Path]:
    """``ctr events`` on the node's containerd for as long as the block runs, into ``log``
    (each line carries containerd's own time stamp)."""
    socket = cluster.node.files.socket
    child: Child = spawn("ctr-events", ["ctr", "--address", str(socket), "events"], log)
    try:
        yield log
    finally:
        child.stop()


def read_task_events(log: Path, since: float) -> list[jp.TaskEvent]:
    events = (jp.parse_ctr_event(line, json.loads) for line in log.read_text().splitlines())
    return [e for e in events if e is not None and e.at >= since]


def first_log_time(cluster: Cluster, pod: str) -> float | None:
    """The CRI time stamp of the first line the agent's container logged (the kubelet keeps
    ``<podLogsDir>/<namespace>_<pod>_<uid>/<container>/0.log``)."""
    for path in sorted((cluster.node.spec.logs / "pods").glob(f"{NAMESPACE}_{pod}_*/*/0.log")):
        with path.open() as lines:
            if first := lines.readline():
                return jp.parse_cri_log_time(first)
    return None


# ------------------------------------------------------------------ the bench
@dataclass(frozen=True)
class JoinBench:
    cluster: Cluster
    helm: Path
    ctr_log: Path

    @property
    def kube(self) -> Client:
        return self.cluster.kube

    @property
    def node_name(self) -> str:
        return self.cluster.node.spec.name


def install(bench: JoinBench, our_chart: Path, go_ref: tuple[str, str]) -> dict[str, float]:
    """Both charts, ``helm install --wait``: each DaemonSet's Pod runs on the node once (the
    images work), then both are drained. Returns each install's seconds."""
    gateway = bench.cluster.node.gateway
    seconds = {
        "ours": run_helm(bench.cluster, bench.helm, "install", our_chart,
                         values=jp.our_values(bench.cluster.image, gateway)),
        "go": run_helm(bench.cluster, bench.helm, "install", GO_CHART,
                       values=jp.go_values(go_ref, gateway), release=GO_RELEASE),
    }  # fmt: skip
    drain(bench)
    return seconds


def _agent_pods(bench: JoinBench, daemonset: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = bench.kube.list(r.PODS, namespace=NAMESPACE)["items"]
    return [p for p in pods if jp.owner_name(p) == daemonset]


def _select(bench: JoinBench, impl: str, hostname: str | None) -> None:
    """Point ``impl``'s DaemonSet at ``hostname`` (None: no Node) and wait until its
    controller has acted on it."""
    name = DAEMONSET[impl]
    bench.kube.patch(DAEMONSETS, name, jp.selector_patch(hostname), namespace=NAMESPACE,
                     patch_type="merge")  # fmt: skip
    eventually(lambda: jp.observed(bench.kube.get(DAEMONSETS, name, namespace=NAMESPACE)),
               timeout=DRAIN_TIMEOUT, message=f"DaemonSet {name} observed")  # fmt: skip


def drain(bench: JoinBench) -> None:
    """No DaemonSet selects the node; every agent Pod is gone (its container stopped first:
    the kubelet ends a graceful deletion only once the containers have exited)."""
    for impl in DAEMONSET:
        _select(bench, impl, None)
    eventually(lambda: not any(_agent_pods(bench, name) for name in DAEMONSET.values()),
               timeout=DRAIN_TIMEOUT, message="the agents' Pods gone")  # fmt: skip


def leave(bench: JoinBench) -> None:
    """The kubelet stops and its Node is deleted."""
    bench.cluster.node.stop_kubelet()
    with contextlib.suppress(NotFound):
        bench.kube.delete(r.NODES, bench.node_name)

    def gone() -> bool:
        try:
            bench.kube.get(r.NODES, bench.node_name)
        except NotFound:
            return True
        return False

    eventually(gone, timeout=DRAIN_TIMEOUT, message=f"Node {bench.node_name} deleted")


def run_join(bench: JoinBench, impl: str, tag: str) -> dict[str, Any]:
    """One join of ``impl`` (see the module docstring); its timeline, phases and checks."""
    drain(bench)
    leave(bench)
    _select(bench, impl, bench.node_name)
    node_rv = bench.kube.list(r.NODES)["metadata"]["resourceVersion"]
    pod_rv = bench.kube.list(r.PODS, namespace=NAMESPACE)["metadata"]["resourceVersion"]
    admin, selector = bench.cluster.plane.admin_kubeconfig, f"metadata.name={bench.node_name}"
    kubelet_log = bench.cluster.node.spec.logs / "kubelet.log"
    log_from = kubelet_log.stat().st_size
    with (
        Recorder(admin, r.NODES, node_rv, field_selector=selector) as nodes,
        Recorder(admin, r.PODS, pod_rv, namespace=NAMESPACE) as pods,
    ):
        started = time.time()
        bench.cluster.node.start_kubelet()
        what = f"{impl}: the Node initialised\n{bench.cluster.node.tails()}"
        untainted = nodes.wait_for(lambda e: e.kind != "DELETED" and not jp.is_tainted(e.obj),
                                   JOIN_TIMEOUT, what)  # fmt: skip
        pods.wait_for(lambda e: jp.owner_name(e.obj) == DAEMONSET[impl] and jp.is_running(e.obj),
                      REPORT_TIMEOUT, f"{impl}: the Pod reported running")  # fmt: skip
        node_events, pod_events = nodes.snapshot(), pods.snapshot()
    line = jp.timeline(kubelet_started=started, nodes=node_events, pods=pod_events,
                       daemonset=DAEMONSET[impl],
                       tasks=read_task_events(bench.ctr_log, started))  # fmt: skip
    if line.pod is not None:
        line = _with_node_logs(bench, line, kubelet_log, log_from)
    owners = {jp.owner_name(e.obj) for e in pod_events}
    others = sorted(str(n) for n in owners - {DAEMONSET[impl], None})
    return {
        "impl": impl, "tag": tag, "node_uid": untainted.obj["metadata"]["uid"],
        "timeline": asdict(line), "phases": jp.phases(line), "other_daemonsets": others,
        "addresses_when_untainted": jp.addresses(untainted.obj),
        "addresses": _settled_addresses(bench),
    }  # fmt: skip


def _settled_addresses(bench: JoinBench) -> list[tuple[str, str]]:
    """The Node's addresses once the agent has written its InternalIP (both agents write it
    before they remove the taint; waited for all the same)."""
    want = ("InternalIP", bench.cluster.node.address)

    def written() -> list[tuple[str, str]] | None:
        found = jp.addresses(bench.kube.get(r.NODES, bench.node_name))
        return found if want in found else None

    return eventually(written, timeout=REPORT_TIMEOUT, message=f"{want} on the Node")


def _with_node_logs(
    bench: JoinBench, line: jp.Timeline, kubelet_log: Path, log_from: int
) -> jp.Timeline:
    """The timeline with what only the node's logs tell: when the kubelet got the Pod (its
    log from ``log_from`` on) and the agent's first log line."""
    assert line.pod is not None
    pod = line.pod
    first = eventually(lambda: first_log_time(bench.cluster, pod), timeout=REPORT_TIMEOUT,
                       message=f"{pod}: a first log line")  # fmt: skip
    with kubelet_log.open("rb") as log:
        log.seek(log_from)
        text = log.read().decode(errors="replace")
    local = time.localtime(line.kubelet_started)
    saw = jp.kubelet_saw_pod(text, pod, year=local.tm_year, utc_offset=local.tm_gmtoff)
    return replace(line, first_log=first, kubelet_saw_pod=saw)


def ctr_tail(bench: JoinBench) -> str:
    return tail(bench.ctr_log, 20)
