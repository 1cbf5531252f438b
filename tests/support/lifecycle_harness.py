"""Running node-lifecycle-controller against the test apiserver with exactly the RBAC of
tests/support/rbac/lifecycle.yaml.

Two ways: `InProcessController` (a thread with its own event loop, the real kube adapter, an
optional injected prober, and `watch_selector` so only the test's Nodes are seen while the
scope rules stay those of the flags), and `spawn_controller` (a subprocess of the real entry
point, for failover and signal tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from string import Template
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from local_ccm.cli import central
from local_ccm.cli import lifecycle as composition
from local_ccm.cli.central import Place
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.kube.errors import NotFound
from local_ccm.kube.transport import usable_config
from local_ccm.lifecycle.api import KubeNodeApi, NodeApi, NodeEvent, NodeList, Obj
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.options import PROG, LifecycleOptions
from local_ccm.lifecycle.probe import Prober
from local_ccm.runtime.host import Shared, Unit, write_timeout_of
from local_ccm.runtime.serve import Servers
from tests.support import resources as r
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.options import load_lifecycle as load_options
from tests.support.processes import Child, spawn
from tests.support.waiting import eventually

RBAC = Path(__file__).resolve().parent / "rbac" / "lifecycle.yaml"
SA = "node-lifecycle-controller"
ONLY_WITH = "local-ccm.io/only-with"
AUTOSCALER_TAINT = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
# With retry 0.5 s and metrics/health off unless a test asks.
FAST = (
    "--not-ready-timeout=10s", "--reconcile-interval=1s", "--ping-timeout=1s", "--ping-count=1",
    "--ping-interval=200ms", "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=0.5s",
    "--max-unhealthy=100%", "--metrics-bind-address=0", "--health-probe-bind-address=0",
)  # fmt: skip
_KINDS = {
    "ServiceAccount": r.SERVICE_ACCOUNTS, "ClusterRole": r.CLUSTER_ROLES,
    "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS, "Role": r.ROLES, "RoleBinding": r.ROLE_BINDINGS,
}  # fmt: skip
PROMETHEUS_PREFIX = "local_ccm_lifecycle_"


def apply_rbac(
    kube: Client,
    track: Tracker,
    labels: Mapping[str, str],
    *,
    name: str,
    namespace: str,
    lease: str,
    event_namespace: str = "default",
    out_of_service: bool = False,
) -> Path:
    """Create the shipped RBAC objects (labelled, tracked); return nothing to clean by hand."""
    text = Template(RBAC.read_text()).substitute(
        NAME=name, NAMESPACE=namespace, LEASE_NAME=lease, EVENT_NAMESPACE=event_namespace
    )
    for doc in yaml.safe_load_all(text):
        meta = doc["metadata"]
        if (meta.get("annotations") or {}).get(ONLY_WITH) and not out_of_service:
            continue
        meta["labels"] = dict(labels)
        res = _KINDS[doc["kind"]]
        kube.create(res, doc, namespace=meta.get("namespace"))
        track(res, meta["name"], meta.get("namespace"))
    return RBAC


def controller_user(namespace: str) -> tuple[str, list[str]]:
    return f"system:serviceaccount:{namespace}:{SA}", [
        "system:serviceaccounts", f"system:serviceaccounts:{namespace}",
    ]  # fmt: skip


def controller_kubeconfig(control_plane: ControlPlane, kube: Client, namespace: str) -> Path:
    """A TokenRequest token of the ServiceAccount (preferred to a client certificate, whose
    CN could not hold a 63-character namespace), once RBAC lets it delete."""
    user, groups = controller_user(namespace)
    path = control_plane.token_kubeconfig(SA, namespace)
    body = {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups,
                 "resourceAttributes": {"verb": "delete", "resource": "nodes", "group": ""}},
    }  # fmt: skip

    def allowed() -> bool:
        review = kube.create(r.SUBJECT_ACCESS_REVIEWS, body)
        return bool(review.get("status", {}).get("allowed"))

    eventually(allowed, timeout=10, message="RBAC for the controller")
    return path


def options(argv: Sequence[str], kubeconfig: Path) -> LifecycleOptions:
    loaded = load_options([*FAST, f"--kubeconfig={kubeconfig}", *argv], {})
    if not isinstance(loaded, LifecycleOptions):
        raise AssertionError(f"invalid test command line {list(argv)}: {loaded}")
    return loaded


@dataclass(frozen=True)
class Started:
    """Handed to `on_start`: what the running controller is made of."""

    identity: str
    metrics: LifecycleMetrics
    health_port: int | None
    metrics_port: int | None


async def run_lifecycle(
    options: LifecycleOptions,
    env: Mapping[str, str],
    *,
    stop: asyncio.Event,
    prober: Prober | None = None,
    on_start: Callable[[Started], None] | None = None,
    watch_selector: str | None = None,
    wrap_api: Callable[[NodeApi], NodeApi] | None = None,
) -> int:
    """The binary after flag parsing, in a thread with its own loop: the manager's path with
    this controller alone, its unit built here from the composition's public parts with what
    the test injects (`prober`, `wrap_api` around the real adapter, `watch_selector`)."""
    metrics = LifecycleMetrics()
    made: list[str] = []

    def build(opts: LifecycleOptions, shared: Shared, place: Place) -> Unit:
        made.append(place.identity)
        client = composition.client_of(place.cluster, metrics)
        write_timeout = write_timeout_of(shared.lease)
        kube_api = KubeNodeApi(AsyncClient(client), write_timeout=write_timeout)
        api: NodeApi = wrap_api(kube_api) if wrap_api else kube_api
        probe, problem = (prober, "") if prober else composition.build_prober(opts, metrics)
        config = composition.loop_config(opts)
        if watch_selector is not None:
            config = replace(config, selector=watch_selector)
        parts = composition.Parts(client, api, probe, metrics, config, problem, bmcs=kube_api)
        return composition.assemble(opts, place, parts)

    def running(servers: Servers) -> None:
        if on_start is not None:
            health, scrape = servers.health, servers.metrics
            ports = health.port if health else None, scrape.port if scrape else None
            on_start(Started(made[0], metrics, *ports))

    loaded = central.Loaded(replace(composition.controller(), build=build), options)
    cluster = usable_config(options.kubeconfig, "", env)
    return await central.run_loaded(PROG, env, [loaded], shared=loaded.shared(), cluster=cluster,
                                    stop=stop, on_running=running)  # fmt: skip


class InProcessController:
    """`with InProcessController(opts, ...) as c:` runs the controller until the block ends."""

    def __init__(
        self,
        opts: LifecycleOptions,
        *,
        prober: Prober | None = None,
        watch_selector: str | None = None,
        wrap_api: Callable[[NodeApi], NodeApi] | None = None,
    ) -> None:
        self.options, self.prober, self.watch_selector = opts, prober, watch_selector
        self.wrap_api = wrap_api
        self.started: Started | None = None
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="lifecycle-under-test", daemon=True)

    def _main(self) -> None:
        try:
            self.exit_code = asyncio.run(self._run())
        except BaseException as exc:  # reported by start()/stop()
            self.error = exc
        finally:
            self._ready.set()

    async def _run(self) -> int:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

        def on_start(started: Started) -> None:
            self.started = started
            self._ready.set()

        return await run_lifecycle(
            self.options, {}, stop=self._stop, prober=self.prober, on_start=on_start,
            watch_selector=self.watch_selector, wrap_api=self.wrap_api,
        )  # fmt: skip

    def start(self) -> InProcessController:
        self._thread.start()
        if not self._ready.wait(30) or self.started is None:
            raise AssertionError(f"the controller did not start: exit {self.exit_code} "
                                 f"{self.error!r}")  # fmt: skip
        return self

    def stop(self, timeout: float = 15.0) -> int | None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError("the controller did not stop")
        if self.error is not None:
            raise AssertionError(f"the controller failed: {self.error!r}") from self.error
        return self.exit_code

    def __enter__(self) -> InProcessController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def value(self, name: str, **labels: str) -> float:
        """A `local_ccm_lifecycle_<name>` sample."""
        return self.sample(PROMETHEUS_PREFIX + name, **labels)

    def sample(self, full_name: str, **labels: str) -> float:
        """A sample by its full name: the series every controller has (`local_ccm_watch_...`,
        `workqueue_...`) carry no lifecycle prefix; `labels` must be all of its labels."""
        assert self.started is not None
        sample = self.started.metrics.registry.get_sample_value(full_name, labels)
        return sample or 0.0


# ------------------------------------------------------------------ subprocesses
def spawn_controller(name: str, argv: Sequence[str], kubeconfig: Path, log_dir: Path) -> Child:
    binary = Path(sys.executable).parent / "node-lifecycle-controller"
    args = [str(binary), *FAST, f"--kubeconfig={kubeconfig}", *argv]
    return spawn(name, args, log_dir / f"{name}.log", env={"PATH": "/usr/bin:/bin"})


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics endpoint, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def metric(port: int, name: str, **labels: str) -> float:
    key = (PROMETHEUS_PREFIX + name, tuple(sorted(labels.items())))
    return scrape(port).get(key, 0.0)


def leading(port: int) -> float:
    """client-go's `leader_election_master_status` (of the one Lease the process elects on)."""
    found = scrape(port)
    return sum(v for (name, _), v in found.items() if name == "leader_election_master_status")


# ------------------------------------------------------------------ Nodes and Events
def eligible_node(
    make_node: NodeFactory,
    *addresses: str,
    name: str | None = None,
    ready: str = "Unknown",
    age: float = 60.0,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (AUTOSCALER_TAINT,),
    address_type: str = "InternalIP",
) -> dict[str, Any]:
    """An "eligible" Node: tainted, Ready=Unknown since `age` seconds ago."""
    since = datetime.now(UTC) - timedelta(seconds=age)
    return make_node(
        name, labels=labels, annotations=annotations, taints=taints, ready=ready,
        ready_since=since,
        addresses=[{"type": address_type, "address": a} for a in addresses],
    )  # fmt: skip


def node_events(kube: Client, uid: str, namespace: str = "default") -> list[dict[str, Any]]:
    listed = kube.list(r.EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={uid}")
    return list(listed.get("items") or [])


def reasons(kube: Client, uid: str, namespace: str = "default") -> list[str]:
    return [e["reason"] for e in node_events(kube, uid, namespace)]


def exists(kube: Client, name: str, uid: str | None = None) -> bool:
    try:
        node = kube.get(r.NODES, name)
    except NotFound:
        return False
    return uid is None or node["metadata"]["uid"] == uid


class NamedNodes:
    """A `NodeApi` that shows only the Nodes named in `names` to the cache (for Nodes that
    carry no label to select them by); every other call goes to the real adapter."""

    def __init__(self, inner: NodeApi, names: Sequence[str]) -> None:
        self.inner, self.names = inner, set(names)

    def _mine(self, node: Obj) -> bool:
        return (node.get("metadata") or {}).get("name") in self.names

    async def list_nodes(
        self, selector: str | None = None, token: str | None = None, *, fields: str | None = None
    ) -> NodeList:
        listed = await self.inner.list_nodes(selector, token, fields=fields)
        mine = tuple(n for n in listed.items if self._mine(n))
        return NodeList(mine, listed.resource_version, listed.continue_token)

    async def watch_nodes(
        self,
        selector: str | None,
        resource_version: str,
        *,
        fields: str | None = None,
        initial_events: bool = False,
    ) -> AsyncIterator[NodeEvent]:
        async for event in self.inner.watch_nodes(
            selector, resource_version, fields=fields, initial_events=initial_events
        ):
            if event.type == "BOOKMARK" or self._mine(event.node):
                yield event

    async def get_node(self, name: str) -> Obj:
        return await self.inner.get_node(name)

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool = False
    ) -> None:
        await self.inner.delete_node(name, uid=uid, resource_version=resource_version,
                                     dry_run=dry_run)  # fmt: skip

    async def patch_node(
        self, name: str, operations: Sequence[Obj], *, subresource: str | None = None
    ) -> Obj:
        return await self.inner.patch_node(name, operations, subresource=subresource)

    async def count_volume_attachments(self, node_name: str) -> int:
        return await self.inner.count_volume_attachments(node_name)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return await self.inner.create_event(namespace, body)
