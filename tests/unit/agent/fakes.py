"""In-memory fakes behind the agent loop's seams: the Node API and detection.

They stand in for our own Protocols only. The Node store applies RFC 6902 JSON Patches
(add/remove/replace/test) with a resourceVersion bump, so conflict handling can be
exercised; Kubernetes semantics themselves are proven by the integration tier.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.plan import Patch
from local_ccm.agent.loop import Agent
from local_ccm.agent.nodeapi import (
    ConflictError,
    NodeApiError,
    NodeEvent,
    NodeList,
)
from tests.fakes import FakeClock

Obj = dict[str, Any]


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _resolve(doc: Any, path: str) -> tuple[Any, str]:
    parts = [_unescape(p) for p in path.split("/")[1:]]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def apply_json_patch(doc: Obj, operations: list[Obj]) -> Obj:
    """RFC 6902 for the operations the agent sends; a failed test raises ConflictError
    (as ``local_ccm.kube`` reports the apiserver's bare 422)."""
    doc = copy.deepcopy(doc)
    for op in operations:
        try:
            parent, key = _resolve(doc, op["path"])
            _apply_one(parent, key, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ConflictError(f"patch not applicable: {op} ({exc})", status=422) from exc
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


@dataclass
class FakeNodeApi:
    """One Node (or none), with a call log and watchers fed by every change."""

    name: str
    node: Obj | None = None
    rv: int = 100
    calls: list[str] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)
    denied: set[str] = field(default_factory=set)  # "verb resource[/sub]" answered False
    fail_next: list[NodeApiError] = field(default_factory=list)  # raised by the next patches
    ssar_fail_next: list[NodeApiError] = field(default_factory=list)  # by the next reviews
    before_patch: Callable[[FakeNodeApi], None] | None = None  # a racing writer
    watchers: list[asyncio.Queue[NodeEvent | NodeApiError | None]] = field(default_factory=list)

    def put(self, node: Obj | None, event: str = "MODIFIED") -> None:
        """Store ``node`` as another writer would (bumping the RV) and notify watchers."""
        if node is None:
            old, self.node = self.node, None
            if old is not None:
                self._notify("DELETED", old)
            return
        self.rv += 1
        node = copy.deepcopy(node)
        node.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        node["metadata"].setdefault("uid", "uid-1")
        self.node = node
        self._notify(event, node)

    def _notify(self, kind: str, node: Obj) -> None:
        for queue in self.watchers:
            queue.put_nowait(NodeEvent(kind, copy.deepcopy(node)))

    def api_calls(self) -> int:
        """Every request but the long-running watch."""
        return sum(1 for c in self.calls if not c.startswith("watch"))

    async def list_node(self, name: str) -> NodeList:
        self.calls.append("list")
        return NodeList(copy.deepcopy(self.node), str(self.rv))

    async def watch_node(self, name: str, resource_version: str) -> AsyncIterator[NodeEvent]:
        self.calls.append(f"watch {resource_version}")
        queue: asyncio.Queue[NodeEvent | NodeApiError | None] = asyncio.Queue()
        self.watchers.append(queue)
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, NodeApiError):
                    raise item
                yield item
        finally:
            self.watchers.remove(queue)

    async def patch_node(self, name: str, patch: Patch) -> Obj:
        self.calls.append(f"patch {patch.subresource or 'node'}")
        self.patches.append(patch)
        if self.before_patch is not None:
            self.before_patch(self)
        if self.fail_next:
            raise self.fail_next.pop(0)
        if self.node is None:
            from local_ccm.agent.nodeapi import NotFoundError  # noqa: PLC0415

            raise NotFoundError("nodes not found", status=404)
        patched = apply_json_patch(self.node, patch.body())
        self.put(patched)
        assert self.node is not None
        return copy.deepcopy(self.node)

    async def create_event(self, namespace: str, body: Obj) -> None:
        self.calls.append("event")
        self.events.append(body)

    async def can_i(
        self, verb: str, resource: str, *, subresource: str = "", namespace: str = ""
    ) -> bool:
        self.calls.append("ssar")
        if self.ssar_fail_next:
            raise self.ssar_fail_next.pop(0)
        return f"{verb} {resource}{'/' + subresource if subresource else ''}" not in self.denied

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]


@dataclass
class FakeDetector:
    """Detection results the test sets; counts the passes that detected."""

    results: dict[DetectorKey, Detection] = field(default_factory=dict)
    runs: int = 0

    def set(self, results: Mapping[DetectorKey, Detection]) -> None:
        self.results = dict(results)

    async def __call__(self) -> Mapping[DetectorKey, Detection]:
        self.runs += 1
        return dict(self.results)


# ------------------------------------------------------------------ driving the loop
def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """A coroutine test as a plain one: pytest passes its fixtures, ``asyncio.run`` awaits it."""

    @functools.wraps(test)
    def sync(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return sync


async def start_loop(agent: Agent, clock: FakeClock, *, timeout: float = 5) -> asyncio.Task[int]:
    """``agent.run_loop`` without the access review, until its first pass has completed."""
    task = asyncio.get_running_loop().create_task(agent.run_loop(check_access=False))
    await clock.run_until(lambda: agent.health.first_pass, timeout=timeout)
    return task


async def stop(task: asyncio.Task[int]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
