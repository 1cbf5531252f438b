"""kwok wiring on every change: ~20 fake nodes go Ready, a chaos flip makes one
Ready=False, and removing the label brings it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.support import kwok as kw
from tests.support import resources as r
from tests.support.cleanup import Tracker
from tests.support.waiting import eventually

pytestmark = pytest.mark.kwok
NODES = 20


def _ready_status(node: Mapping[str, Any]) -> tuple[str, str]:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return cond["status"], cond.get("reason", "")
    return "missing", ""


def _all_ready(kube: Client, selector: str) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = kube.list(r.NODES, label_selector=selector)["items"]
    ready = [n for n in items if kw.is_ready(n)]
    return items if len(items) == NODES and len(ready) == NODES else None


def test_kwok_nodes_go_ready_flip_not_ready_and_recover(
    kwok: kw.Kwok,
    kube: Client,
    unique_name: str,
    test_labels: dict[str, str],
    track: Tracker,
) -> None:
    bodies = [
        kw.fake_node_body(
            f"{unique_name}-{i}",
            test_labels,
            addresses=[{"type": "InternalIP", "address": kw.loopback_address(i)}],
            provider_id=f"local://{unique_name}-{i}",
        )
        for i in range(NODES)
    ]
    for body in kw.create_fake_nodes(lambda b: kube.create(r.NODES, b), bodies):
        track(r.NODES, body["metadata"]["name"])
    selector = ",".join(f"{k}={v}" for k, v in test_labels.items())
    eventually(lambda: _all_ready(kube, selector), timeout=60, message="all kwok nodes Ready")

    victim = bodies[0]["metadata"]["name"]
    chaos = {"metadata": {"labels": {kw.CHAOS_LABEL: "true"}}}
    kube.patch(r.NODES, victim, chaos, patch_type="merge")
    eventually(
        lambda: _ready_status(kube.get(r.NODES, victim)) == ("False", "nodeFailed"),
        timeout=30,
        message=f"{victim} Ready=False by the chaos stage",
    )
    node = kube.get(r.NODES, victim)
    # Preset addresses survive kwok's stages (fake_node_body adds the Hostname that makes
    # node-initialize leave them alone).
    assert node["status"]["addresses"] == bodies[0]["status"]["addresses"], node

    kube.patch(
        r.NODES, victim, {"metadata": {"labels": {kw.CHAOS_LABEL: None}}}, patch_type="merge"
    )
    eventually(lambda: _all_ready(kube, selector), timeout=30, message=f"{victim} Ready again")
