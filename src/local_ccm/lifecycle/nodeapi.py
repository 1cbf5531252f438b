"""What node-lifecycle-controller adds to the Node API adapter: slimmed LIST pages, the
VolumeAttachments of a Node, and the permissions it needs.

Errors are the kinds of ``local_ccm.kube.errors``; the loop has one policy for each.
"""

from __future__ import annotations

from typing import Protocol

from local_ccm.kube import nodes as kn
from local_ccm.kube import resources as r
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.nodes import Access, NodeEvent, NodeList, Obj
from local_ccm.lifecycle.core.model import slim_node

__all__ = ["KubeNodeApi", "NodeApi", "NodeEvent", "NodeList", "Obj"]

VOLUME_ATTACHMENTS = r.Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)


class NodeApi(kn.NodeApi, Protocol):
    """``local_ccm.kube.nodes.NodeApi`` and the VolumeAttachments of a Node."""

    async def count_volume_attachments(self, node_name: str) -> int: ...


class KubeNodeApi(kn.KubeNodeApi):
    """:class:`NodeApi` over :class:`AsyncClient`; `observe` is told of each request."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        write_timeout: float | None = None,
        observe: kn.RequestObserver = lambda verb, resource, code, seconds: None,
    ) -> None:
        super().__init__(client, write_timeout=write_timeout, slim=slim_node, observe=observe)

    async def count_volume_attachments(self, node_name: str) -> int:
        listed = await self.call(
            "LIST", "volumeattachments", lambda: self.client.list(VOLUME_ATTACHMENTS)
        )
        return sum(
            1
            for item in listed.get("items") or ()
            if (item.get("spec") or {}).get("nodeName") == node_name
        )


def required_access(*, event_namespace: str, out_of_service: bool) -> list[Access]:
    """What the loop needs; leader election adds its own (`runtime.access.lease_permissions`)."""
    needed = [Access(verb, "nodes") for verb in ("get", "list", "watch", "delete")]
    needed.append(Access("create", "events", namespace=event_namespace))
    if out_of_service:
        needed.append(Access("patch", "nodes"))
        needed.append(Access("list", "volumeattachments", "storage.k8s.io"))
    return needed
