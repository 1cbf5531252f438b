"""node-lifecycle-controller scenarios on a dedicated, audited control plane whose apiserver a
test may stop (L25's audit part, L28, L33).

The plane and stopping/restarting its apiserver come from tests/support/audit.py
(`audited_plane`, `stop_apiserver`, `start_apiserver`: a second etcd + kube-apiserver per test
module, started with ``Options(audit=True)``). This module adds what the lifecycle scenarios
need on it: a namespace with the shipped RBAC and a TokenRequest kubeconfig
(:func:`plane_setup`), and etcd's own JSON gateway to move etcd's revision and compact its
history while the apiserver is down (:func:`etcd_bump`, :func:`etcd_compact`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import threading
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from local_ccm.lifecycle.api import NodeApi, NodeEvent, NodeList, Obj
from tests.support import names
from tests.support import resources as r
from tests.support.audit import AuditEvent, audit_log, service_account_user
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.lifecycle_harness import SA, apply_rbac, controller_kubeconfig

FIELD_MANAGER = "local-ccm-test"
ETCD_TIMEOUT = 5.0


@dataclass(frozen=True)
class PlaneSetup:
    """One test's world on the dedicated plane: the admin client, cleanup, a Node factory and
    the controller's identity (the shipped RBAC in a fresh namespace)."""

    plane: ControlPlane
    kube: Client
    track: Tracker
    make_node: NodeFactory
    namespace: str
    kubeconfig: Path
    selector: str  # matches exactly this test's Nodes

    @property
    def lease(self) -> str:
        return self.namespace

    @property
    def user(self) -> str:
        """The controller's user name in the audit log."""
        return service_account_user(self.namespace, SA)

    def argv(self, *more: str) -> list[str]:
        return [f"--namespace={self.namespace}", f"--leader-elect-id={self.lease}", *more]

    def requests(self, verb: str, resource: str, name: str) -> list[AuditEvent]:
        """The controller's requests of `verb` on `resource`/`name`, completed (with a code)."""
        return [
            e
            for e in audit_log(self.plane).requests(user=self.user, stage="ResponseComplete")
            if e.verb == verb and e.resource == resource and e.name == name
        ]


@contextlib.contextmanager
def plane_setup(plane: ControlPlane, run_id: str, nodeid: str) -> Iterator[PlaneSetup]:
    """A namespace (which also names the Lease and the RBAC objects) with the shipped RBAC;
    everything tracked is deleted at the end, when the apiserver is up again."""
    kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    labels = names.test_labels(run_id, nodeid)
    namespace = names.unique_name(nodeid.rsplit("::", 1)[-1], secrets.token_hex(3))
    track = Tracker(kube, run_id)
    try:
        kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": namespace, "labels": labels}})  # fmt: skip
        apply_rbac(kube, track, labels, name=namespace, namespace=namespace, lease=namespace)
        yield PlaneSetup(
            plane, kube, track, NodeFactory(kube, track, labels, nodeid.rsplit("::", 1)[-1]),
            namespace, controller_kubeconfig(plane, kube, namespace),
            f"{names.TEST_LABEL}={labels[names.TEST_LABEL]}",
        )  # fmt: skip
    finally:
        with contextlib.suppress(ApiError):  # the plane is thrown away with the module anyway
            track.cleanup()
        kube.close()


# ------------------------------------------------------------------ etcd's JSON gateway
def _etcd(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{etcd_url}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=ETCD_TIMEOUT) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def etcd_bump(etcd_url: str, writes: int = 3) -> int:
    """Write a key outside the apiserver's prefix `writes` times; etcd's new revision. A watch
    from any resourceVersion seen before is then older than a cache started afterwards."""
    revision = 0
    for i in range(writes):
        answer = _etcd(etcd_url, "/v3/kv/put", {"key": _b64("/lcct/bump"), "value": _b64(str(i))})
        revision = int(answer["header"]["revision"])
    return revision


def etcd_compact(etcd_url: str, revision: int) -> None:
    """Compact etcd's history up to `revision` (physical: done when this returns)."""
    _etcd(etcd_url, "/v3/kv/compaction", {"revision": str(revision), "physical": True})


def nodes_listed(kube: Client, selector: str) -> Sequence[str]:
    """The names a fresh LIST returns for `selector`, sorted."""
    items = kube.list(r.NODES, label_selector=selector).get("items") or []
    return sorted(item["metadata"]["name"] for item in items)


class HeldWatch:
    """A `NodeApi` over the real adapter whose next watches wait while held: a test holds
    them before cutting the stream, changes the world, then releases, so the controller's
    re-watch comes exactly when the test wants it. Every other call goes straight through."""

    def __init__(self) -> None:
        self._released = threading.Event()
        self._released.set()
        self.inner: NodeApi | None = None

    def wrap(self, inner: NodeApi) -> NodeApi:
        self.inner = inner
        return self

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _api(self) -> NodeApi:
        assert self.inner is not None, "wrap() was not called"
        return self.inner

    async def list_nodes(
        self, selector: str | None = None, token: str | None = None, *, fields: str | None = None
    ) -> NodeList:
        return await self._api().list_nodes(selector, token, fields=fields)

    async def watch_nodes(
        self,
        selector: str | None,
        resource_version: str,
        *,
        fields: str | None = None,
        initial_events: bool = False,
    ) -> AsyncIterator[NodeEvent]:
        while not self._released.is_set():
            await asyncio.sleep(0.05)  # cancellable, unlike a thread blocked in Event.wait
        async for event in self._api().watch_nodes(
            selector, resource_version, fields=fields, initial_events=initial_events
        ):
            yield event

    async def get_node(self, name: str) -> Obj:
        return await self._api().get_node(name)

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool = False
    ) -> None:
        await self._api().delete_node(name, uid=uid, resource_version=resource_version,
                                      dry_run=dry_run)  # fmt: skip

    async def patch_node(
        self, name: str, operations: Sequence[Obj], *, subresource: str | None = None
    ) -> Obj:
        return await self._api().patch_node(name, operations, subresource=subresource)

    async def count_volume_attachments(self, node_name: str) -> int:
        return await self._api().count_volume_attachments(node_name)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return await self._api().create_event(namespace, body)
