"""`--event-namespace` (docs/ipam.md): the API server's rule behind the
start-up check, and the check itself on the real binary."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import Invalid
from tests.integration.ipam.conftest import StartIpam
from tests.support import resources as r


def node_event(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name},
        "reason": "Probe",
        "message": "event namespace probe",
        "type": "Normal",
        "source": {"component": "local-ccm-test"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


def test_apiserver_accepts_events_about_cluster_scoped_objects_only_in_default(
    kube: Client, test_namespace: str, unique_name: str
) -> None:
    with pytest.raises(Invalid) as rejected:
        kube.create(r.EVENTS, node_event(unique_name, test_namespace), namespace=test_namespace)
    assert rejected.value.status == 422
    created = kube.create(r.EVENTS, node_event(unique_name, "default"), namespace="default")
    kube.delete(r.EVENTS, created["metadata"]["name"], namespace="default")


def test_controller_refuses_another_event_namespace(
    start_ipam: StartIpam, test_namespace: str
) -> None:
    # The fixture passes --event-namespace=default first; the later flag wins (Go flags).
    proc = start_ipam(f"--event-namespace={test_namespace}")
    assert proc.child.proc.wait(timeout=30) == 2
    assert "invalid flag --event-namespace" in proc.log()
