"""L35: node-lifecycle-controller started while the API server is down for three minutes.

The real entry point as a subprocess, its kubeconfig pointing at a loopback gate in front of
the test apiserver: connections reset for the first half of the outage, accepted and never
answered for the second, then forwarded. Throughout, /healthz answers 200 (a liveness probe
keeps the Pod) and /readyz 503 with the reason; once the API answers, the controller becomes
ready, takes the Lease and deletes an unreachable NotReady Node after its timeout.
"""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import NotFound
from tests.integration.lifecycle.conftest import Setup
from tests.support import resources as r
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.gate import ApiGate, gated_kubeconfig
from tests.support.lifecycle_harness import eligible_node, exists, spawn_controller
from tests.support.netns import HostLink
from tests.support.processes import Child, free_port, tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
OUTAGE = 180.0  # the API server outage at start-up a controller must ride out
POLL = 1.0
STARTING = 5.0  # the interpreter starting, before any health server could listen
WAITING = "waiting for the API server"


def probe(port: int, path: str) -> tuple[int, str]:
    """(status, body) of the health server; (0, reason) when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}?verbose", timeout=3) as ok:
            return ok.status, ok.read().decode()
    except urllib.error.HTTPError as failed:
        return failed.code, failed.read().decode()
    except OSError as exc:
        return 0, str(exc)


def holder(kube: Client, setup: Setup) -> str | None:
    try:
        lease: dict[str, Any] = kube.get(r.LEASES, setup.lease, namespace=setup.namespace)
    except NotFound:
        return None
    return str(lease["spec"].get("holderIdentity") or "") or None


Sample = tuple[float, int, str, int, str]  # seconds since start, /healthz and /readyz answers


def ride_out(gate: ApiGate, child: Child, health: int) -> list[Sample]:
    """Probe both endpoints every second through the outage: connections reset for its
    first half, hung for the second."""
    started = time.monotonic()
    samples: list[Sample] = []

    def outage_over() -> bool:
        now = time.monotonic() - started
        if gate.mode == "refuse" and now >= OUTAGE / 2:
            gate.mode = "hang"
        sample = (now, *probe(health, "/healthz"), *probe(health, "/readyz"))
        samples.append(sample)
        dead = now >= STARTING and sample[1] != 200  # no need to wait out the rest
        return now >= OUTAGE or dead or child.exited() is not None

    eventually(outage_over, timeout=OUTAGE + 30, interval=POLL, message="the outage")
    return samples


@pytest.mark.timeout(OUTAGE + 180)
def test_l35_api_server_down_at_start_up(
    *,
    setup: Setup,
    control_plane: ControlPlane,
    link: HostLink,
    make_node: NodeFactory,
    kube: Client,
    test_artifacts: Path,
) -> None:
    api = urlsplit(control_plane.api_url)
    assert api.hostname
    assert api.port
    health = free_port()
    with ApiGate((api.hostname, api.port), mode="refuse") as gate:
        kubeconfig = gated_kubeconfig(setup.kubeconfig, control_plane.api_url, gate, test_artifacts)
        argv = setup.argv(f"--node-selector={setup.selector}",
                          f"--health-probe-bind-address=127.0.0.1:{health}")  # fmt: skip
        child = spawn_controller("outage", argv, kubeconfig, test_artifacts)
        try:
            meta = eligible_node(make_node, str(link.unused_v4), age=0)["metadata"]
            samples = ride_out(gate, child, health)
            assert child.exited() is None, tail(child.log_path)
            assert gate.connections > 0, "the controller never tried the API server"
            late = [s for s in samples if s[0] >= STARTING]
            unhealthy = [s[:3] for s in late if s[1] != 200]
            assert not unhealthy, f"/healthz failed during the outage: {unhealthy[:3]}"
            unready = [s for s in late if s[3] == 503 and WAITING in s[4]]
            assert unready == late, f"/readyz during the outage: {late[-1]}"
            assert exists(kube, meta["name"], meta["uid"]), "deleted without the API server"

            gate.mode = "forward"
            eventually(lambda: probe(health, "/readyz")[0] == 200, timeout=60,
                       message="ready once the API server answers")  # fmt: skip
            eventually(lambda: holder(kube, setup), timeout=30, message="the Lease is held")
            eventually(lambda: not exists(kube, meta["name"], meta["uid"]), timeout=60,
                       message="the unreachable NotReady Node is deleted")  # fmt: skip
            child.proc.send_signal(signal.SIGTERM)
            assert child.proc.wait(timeout=10) == 0, tail(child.log_path)
            assert not holder(kube, setup), "the Lease is released on SIGTERM"
        finally:
            child.stop(grace=5)
    assert "Traceback" not in tail(child.log_path, 400)
