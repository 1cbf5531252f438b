"""The shutdown taint's JSON Patches (`core.writes.taint_patch`), applied to real Node JSON
with a JSON Patch implementation: guarded by resourceVersion, touching no other taint."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from local_ccm.bmc.core.model import project_node
from local_ccm.bmc.core.writes import SHUTDOWN, taint_patch

OTHER = {"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"}
SHUTDOWN_EXECUTE = {"key": SHUTDOWN["key"], "effect": "NoExecute"}


class PatchTestError(Exception):
    pass


def apply(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 for the operations and paths these patches use."""
    doc = copy.deepcopy(doc)
    for op in patch:
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "test":
            value = target[int(last)] if isinstance(target, list) else target.get(last)
            if value != op["value"]:
                raise PatchTestError(op["path"])
        elif op["op"] == "add" and last == "-":
            target.append(op["value"])
        elif op["op"] == "add":
            target[last] = op["value"]
        elif op["op"] == "remove":
            del target[int(last)]
    return doc


def node(*taints: dict[str, str], version: str = "7") -> dict[str, Any]:
    spec = {"taints": list(taints)} if taints else {}
    return {"metadata": {"name": "n1", "uid": "u1", "resourceVersion": version}, "spec": spec}


@pytest.mark.parametrize("before", [(), (OTHER,), (OTHER, SHUTDOWN_EXECUTE)])
def test_adding_appends_the_taint_and_keeps_every_other(before: tuple[dict[str, str], ...]) -> None:
    obj = node(*before)
    done = apply(obj, taint_patch(project_node(obj), "add"))
    assert done["spec"]["taints"] == [*before, SHUTDOWN]
    assert project_node(done).is_shut_down


def test_removing_takes_only_the_noschedule_shutdown_taint() -> None:
    obj = node(SHUTDOWN, OTHER, SHUTDOWN_EXECUTE, dict(SHUTDOWN))
    done = apply(obj, taint_patch(project_node(obj), "remove"))
    assert done["spec"]["taints"] == [OTHER, SHUTDOWN_EXECUTE]


def test_a_patch_decided_on_an_older_node_is_refused() -> None:
    seen = node(OTHER, version="7")
    patch = taint_patch(project_node(seen), "add")
    with pytest.raises(PatchTestError, match="resourceVersion"):
        apply(node(OTHER, version="8"), patch)
    removal = taint_patch(project_node(node(SHUTDOWN, version="7")), "remove")
    with pytest.raises(PatchTestError):
        apply(node(SHUTDOWN, version="8"), removal)
