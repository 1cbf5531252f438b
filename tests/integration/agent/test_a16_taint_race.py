"""A concurrent taint writer never loses a taint (A16, A17).

Each round re-adds the uninitialized taint and removes it with the agent's own planner and
patch (index-guarded ``test`` + ``remove``, re-read on conflict), while another thread keeps
adding and removing taints of its own. 1 000 rounds against the real apiserver; every taint
the other writer believes present must be on the Node at all times.
"""

from __future__ import annotations

import threading

import pytest

from local_ccm import names
from local_ccm.agent.core.writes import is_tainted, plan_taint_patch
from local_ccm.kube.client import Client
from local_ccm.kube.errors import Conflict
from tests.support import resources as r
from tests.support.agent_harness import taint_keys
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane

ROUNDS = 1000
UNINITIALIZED = {"key": names.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}


class Racer:
    """Adds ``example.com/racer-<n>`` taints and removes its oldest one, index-guarded."""

    def __init__(self, kube: Client, name: str) -> None:
        self.kube, self.name = kube, name
        self.present: list[str] = []
        self.lost: list[str] = []
        self.writes = 0
        self.stop = threading.Event()
        self._n = 0

    def run(self) -> None:
        while not self.stop.is_set():
            node = self.kube.get(r.NODES, self.name)
            keys = taint_keys(node)
            self.lost += [k for k in self.present if k not in keys]
            self.present = [k for k in self.present if k in keys]
            try:
                if len(self.present) < 3:
                    self._add()
                else:
                    self._remove(keys, self.present[0])
            except Conflict:
                continue

    def _add(self) -> None:
        self._n += 1
        key = f"example.com/racer-{self._n}"
        taint = {"key": key, "effect": "NoSchedule"}
        ops = [{"op": "add", "path": "/spec/taints/-", "value": taint}]
        self.kube.patch(r.NODES, self.name, ops, patch_type="json")
        self.present.append(key)
        self.writes += 1

    def _remove(self, keys: list[str], key: str) -> None:
        i = keys.index(key)
        ops = [
            {"op": "test", "path": f"/spec/taints/{i}/key", "value": key},
            {"op": "remove", "path": f"/spec/taints/{i}"},
        ]
        self.kube.patch(r.NODES, self.name, ops, patch_type="json")
        self.present.remove(key)
        self.writes += 1


def remove_uninitialized(kube: Client, name: str) -> int:
    """The agent's taint removal: read, plan, patch; a conflict re-reads. Returns conflicts."""
    conflicts = 0
    while True:
        node = kube.get(r.NODES, name)
        patch = plan_taint_patch(node, remove_taint=True)
        if patch is None:
            return conflicts
        try:
            kube.patch(r.NODES, name, patch.body(), patch_type="json")
        except Conflict:
            conflicts += 1


@pytest.mark.timeout(300)  # 1 000 rounds of ~4 requests each on a 2-core machine
def test_a16_concurrent_taint_writer_never_loses_a_taint_in_1000_rounds(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory
) -> None:
    name = make_node(uninitialized=True)["metadata"]["name"]
    racer_client = Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="racer")
    racer = Racer(racer_client, name)
    thread = threading.Thread(target=racer.run, daemon=True)
    thread.start()
    conflicts = 0
    try:
        for _ in range(ROUNDS):
            conflicts += remove_uninitialized(kube, name)
            assert not is_tainted(kube.get(r.NODES, name))
            add = [{"op": "add", "path": "/spec/taints/-", "value": UNINITIALIZED}]
            kube.patch(r.NODES, name, add, patch_type="json")
    finally:
        racer.stop.set()
        thread.join(30)
        racer_client.close()
    final = taint_keys(kube.get(r.NODES, name))
    assert racer.lost == [], f"taints lost: {racer.lost}"
    assert [k for k in final if k.startswith("example.com/racer-")] == racer.present
    assert names.NOT_READY_TAINT in final  # added by TaintNodesByCondition, never ours
    assert racer.writes > ROUNDS / 4, f"the other writer barely ran ({racer.writes} writes)"
    print(f"{ROUNDS} rounds, {racer.writes} concurrent writes, {conflicts} conflicts re-read")
