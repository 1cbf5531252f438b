"""An in-memory `local_ccm.kube.nodes.NodeApi`: Nodes, Events and access reviews.

The store applies RFC 6902 JSON Patches (add/remove/replace/test) with a resourceVersion
bump and honours delete preconditions, so conflict handling can be exercised; every change
made through `put` or a write is seen by the open watches.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from local_ccm.kube import errors as ke
from local_ccm.kube.nodes import NodeEvent, NodeList

Obj = dict[str, Any]
END = None  # pushed to a watch: the server ends the stream


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _resolve(doc: Any, path: str) -> tuple[Any, str]:
    parts = [_unescape(p) for p in path.split("/")[1:]]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def apply_json_patch(doc: Obj, operations: Sequence[Obj]) -> Obj:
    """RFC 6902 for the operations the components send; one that cannot be applied (a
    failed test among them) raises Conflict, as `local_ccm.kube` reports the bare 422."""
    doc = copy.deepcopy(doc)
    for op in operations:
        try:
            parent, key = _resolve(doc, op["path"])
            _apply_one(parent, key, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ke.Conflict(422, "Invalid", f"patch not applicable: {op} ({exc})") from exc
    return doc


def _apply_one(parent: Any, key: str, op: Obj) -> None:
    kind = op["op"]
    if isinstance(parent, list):
        index = len(parent) if key == "-" else int(key)
        if kind == "test" and parent[index] != op["value"]:
            raise ValueError("test failed")
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind == "remove":
            del parent[index]
        elif kind == "replace":
            parent[index] = copy.deepcopy(op["value"])
        return
    if kind == "test" and parent[key] != op["value"]:
        raise ValueError("test failed")
    if kind in ("add", "replace"):
        if kind == "replace" and key not in parent:
            raise KeyError(key)
        parent[key] = copy.deepcopy(op["value"])
    elif kind == "remove":
        del parent[key]


@dataclass(frozen=True)
class SentPatch:
    """A JSON Patch the fake received."""

    subresource: str | None
    operations: tuple[Obj, ...]

    def body(self) -> list[Obj]:
        return list(self.operations)


class FakeNodeApi:
    """Nodes by name, with a call log, recorded writes, injected failures and watches.

    `name` names the Node of a one-Node test (`node` reads and writes it). `fail_next` are
    raised by the next patches; `before_patch` plays a racing writer.
    """

    def __init__(self, name: str = "", node: Obj | None = None, *, nodes: Sequence[Obj] = ()):
        self.name = name
        self.nodes: dict[str, Obj] = {}
        self.rv = 100
        self.calls: list[str] = []
        self.patches: list[SentPatch] = []
        self.events: list[Obj] = []
        self.gets: list[str] = []
        self.deletes: list[tuple[str, bool]] = []
        self.attachments: dict[str, int] = {}
        self.fail_next: list[ke.ApiError] = []
        self.before_patch: Callable[[FakeNodeApi], None] | None = None
        self.watchers: list[asyncio.Queue[NodeEvent | BaseException | None]] = []
        self.serves_initial_events = True  # False: refuses them with 422, as before 1.32
        for each in (*nodes, *([node] if node is not None else [])):
            self.store(each)

    @property
    def node(self) -> Obj | None:
        return self.nodes.get(self.name)

    def store(self, node: Obj) -> Obj:
        """Store `node` with a new resourceVersion, unseen by the watches."""
        self.rv += 1
        node = copy.deepcopy(node)
        node.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        node["metadata"].setdefault("uid", "uid-1")
        node["metadata"].setdefault("name", self.name)
        self.nodes[node["metadata"]["name"]] = node
        return node

    def put(self, node: Obj | None, event: str = "MODIFIED") -> None:
        """Store `node` as another writer would and notify the watches; None deletes the
        Node named `name`."""
        if node is None:
            old = self.nodes.pop(self.name, None)
            if old is not None:
                self.push("DELETED", old)
            return
        self.push(event, self.store(node))

    def push(self, kind: str, node: Obj) -> None:
        for queue in self.watchers:
            queue.put_nowait(NodeEvent(kind, copy.deepcopy(node)))

    def end_watches(self, item: BaseException | None = END) -> None:
        """The server ends every open watch (END) or the connection fails with `item`."""
        for queue in self.watchers:
            queue.put_nowait(item)

    @property
    def lists(self) -> int:
        return self.calls.count("list")

    def api_calls(self) -> int:
        """Every request but the long-running watch."""
        return sum(1 for c in self.calls if not c.startswith("watch"))

    def reasons(self, name: str | None = None) -> list[str]:
        return [
            e["reason"] for e in self.events if name is None or e["involvedObject"]["name"] == name
        ]

    async def list_nodes(
        self, selector: str | None = None, token: str | None = None, *, fields: str | None = None
    ) -> NodeList:
        self.calls.append("list")
        wanted = (fields or "").removeprefix("metadata.name=") or None
        items = tuple(copy.deepcopy(n) for key, n in self.nodes.items() if wanted in (None, key))
        return NodeList(items, str(self.rv))

    async def watch_nodes(
        self,
        selector: str | None,
        resource_version: str,
        *,
        fields: str | None = None,
        initial_events: bool = False,
    ) -> AsyncIterator[NodeEvent]:
        self.calls.append("watch initial" if initial_events else f"watch {resource_version}")
        if initial_events and not self.serves_initial_events:
            raise ke.Invalid(422, "Invalid", "sendInitialEvents is forbidden for watch")
        queue: asyncio.Queue[NodeEvent | BaseException | None] = asyncio.Queue()
        self.watchers.append(queue)
        if initial_events:
            wanted = (fields or "").removeprefix("metadata.name=") or None
            for key, node in self.nodes.items():
                if wanted in (None, key):
                    queue.put_nowait(NodeEvent("ADDED", copy.deepcopy(node)))
            end = {"metadata": {"resourceVersion": str(self.rv),
                                "annotations": {"k8s.io/initial-events-end": "true"}}}  # fmt: skip
            queue.put_nowait(NodeEvent("BOOKMARK", end))
        try:
            while (item := await queue.get()) is not END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.watchers.remove(queue)

    async def get_node(self, name: str) -> Obj:
        self.calls.append("get")
        self.gets.append(name)
        if name not in self.nodes:
            raise ke.NotFound(404, "NotFound", f'nodes "{name}" not found')
        return copy.deepcopy(self.nodes[name])

    async def patch_node(
        self, name: str, operations: Sequence[Obj], *, subresource: str | None = None
    ) -> Obj:
        self.calls.append(f"patch {subresource or 'node'}")
        self.patches.append(SentPatch(subresource, tuple(operations)))
        if self.before_patch is not None:
            self.before_patch(self)
        if self.fail_next:
            raise self.fail_next.pop(0)
        if name not in self.nodes:
            raise ke.NotFound(404, "NotFound", "nodes not found")
        stored = self.store(apply_json_patch(self.nodes[name], operations))
        self.push("MODIFIED", stored)
        return copy.deepcopy(stored)

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool = False
    ) -> None:
        self.calls.append("delete")
        self.deletes.append((name, dry_run))
        node = self.nodes.get(name)
        if node is None:
            raise ke.NotFound(404, "NotFound", name)
        meta = node["metadata"]
        if meta["uid"] != uid or meta["resourceVersion"] != resource_version:
            raise ke.Conflict(409, "Conflict", "Precondition failed")
        if not dry_run:
            del self.nodes[name]
            self.push("DELETED", node)

    async def count_volume_attachments(self, node_name: str) -> int:
        return self.attachments.get(node_name, 0)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        self.calls.append("event")
        self.events.append(body)
        return body
