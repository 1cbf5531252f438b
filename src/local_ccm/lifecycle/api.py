"""What node-lifecycle-controller adds to the Node API adapter: slimmed LIST pages, the
VolumeAttachments of a Node and, with `--bmc-power-state`, the NodeBMCs (node-bmc's resource:
listed and watched, read afresh before an action, annotated with a power-off request). The
permissions it needs are declared with its controller.

Errors are the kinds of ``local_ccm.kube.errors``; the loop has one policy for each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from local_ccm import names
from local_ccm.kube import nodes as kn
from local_ccm.kube import resources as r
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.nodes import NodeEvent, NodeList, Obj
from local_ccm.lifecycle.core.model import slim_node

__all__ = ["BmcApi", "KubeNodeApi", "NodeApi", "NodeEvent", "NodeList", "Obj"]

VOLUME_ATTACHMENTS = r.Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)
NODEBMCS = r.Resource(names.BMC_GROUP, names.BMC_VERSION, names.NODEBMC_PLURAL,
                      names.NODEBMC_KIND, namespaced=False)  # fmt: skip


class NodeApi(kn.NodeApi, Protocol):
    """``local_ccm.kube.nodes.NodeApi`` and the VolumeAttachments of a Node."""

    async def count_volume_attachments(self, node_name: str) -> int: ...


class BmcApi(Protocol):
    """The NodeBMCs, as the lifecycle controller reads and annotates them."""

    def list_watch_nodebmcs(self) -> ListWatch: ...

    async def get_nodebmc(self, name: str) -> Obj:
        """A quorum read; NotFound when the Node has no NodeBMC."""
        ...

    async def patch_nodebmc(self, name: str, operations: Sequence[Obj]) -> Obj:
        """A JSON Patch of the NodeBMC (a failed `test` -> Conflict)."""
        ...


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

    def list_watch_nodebmcs(self) -> ListWatch:
        return KubeListWatch(self.client, NODEBMCS)

    async def get_nodebmc(self, name: str) -> Obj:
        return await self.call("GET", NODEBMCS.plural, lambda: self.client.get(NODEBMCS, name))

    async def patch_nodebmc(self, name: str, operations: Sequence[Obj]) -> Obj:
        return await self.call("PATCH", NODEBMCS.plural, lambda: self.client.patch(
            NODEBMCS, name, list(operations), timeout=self._write_timeout))  # fmt: skip
