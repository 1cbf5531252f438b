"""What the agent adds to the Node API adapter: reading and watching its own Node.

The seam is ``local_ccm.kube.nodes.NodeApi``; errors are the kinds of
``local_ccm.kube.errors`` (a JSON Patch whose ``test`` failed is a Conflict).
"""

from __future__ import annotations

from local_ccm.kube.errors import ApiError, Gone
from local_ccm.kube.informer import ErrorKinds
from local_ccm.kube.nodes import KubeNodeApi, NodeApi, NodeListWatch, Obj
from local_ccm.records import dataclass

__all__ = ["INFORMER_ERRORS", "KubeNodeApi", "NodeApi", "OwnNodeList", "list_own_node", "own_node"]

#: The informer's policy for the agent: 410 relists, every other failure is retried.
INFORMER_ERRORS = ErrorKinds(gone=(Gone,), retried=(ApiError,))


def _selector(name: str) -> str:
    return f"metadata.name={name}"


@dataclass(frozen=True)
class OwnNodeList:
    """The agent's Node (None when absent) and the list's resourceVersion."""

    node: Obj | None
    resource_version: str


async def list_own_node(api: NodeApi, name: str) -> OwnNodeList:
    """LIST by field selector: a consistent read of one Node."""
    listed = await api.list_nodes(fields=_selector(name))
    return OwnNodeList(listed.items[0] if listed.items else None, listed.resource_version)


def own_node(api: NodeApi, name: str) -> NodeListWatch:
    """The Informer's ``ListWatch`` of the agent's own Node."""
    return NodeListWatch(api, fields=_selector(name))
