"""What node-lifecycle-controller adds to the Node API adapter: slimmed LIST pages and the
VolumeAttachments of a Node (the permissions it needs are declared with its controller).

Errors are the kinds of ``local_ccm.kube.errors``; the loop has one policy for each.
"""

from __future__ import annotations

from typing import Protocol

from local_ccm.kube import nodes as kn
from local_ccm.kube import resources as r
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.nodes import NodeEvent, NodeList, Obj
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
