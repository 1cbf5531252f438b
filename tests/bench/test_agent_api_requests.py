"""Agent benchmark: API requests per node-hour at steady state (docs/benchmarks.md).

Counted by the apiserver, never by the agent: a control plane of its own (nothing else talks
to it) with an audit log at level Metadata, so every request carries the user who made it.
Two agents run at once, each in its own namespace, on its own Node, as its own user:

- ``default``: default flags (resync 30 m, watch ``timeoutSeconds`` random in 300-600 s);
- ``resync-1m``: ``--resync-interval=1m``, the shortest allowed, so that a few resyncs fall
  into the window and the cost of one resync is measured rather than assumed.

After both Nodes are initialised and a warm-up, a window of WINDOW seconds is measured in
which nothing changes. Counted per agent: requests received in the window (audit stage
RequestReceived), by verb and resource. Cross-check: the delta of the apiserver's own
``apiserver_request_total`` for nodes and events over the window (it has no user label, so it
is the two agents together, and it counts a WATCH when it ends). The per-hour figure at the
default flags comes from the loop's cost model (``simulate_requests_per_hour``), whose
inputs - what a resync costs, what a tick costs, that a watch is reopened when it times
out - are the measured ones; the window's direct extrapolation is reported next to it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.bench.agent_bench import (
    AgentProcess,
    grant_agent,
    is_tainted,
    machine_facts,
    node_uplink,
    simulate_requests_per_hour,
    write_result,
)
from tests.support import nodes
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.chart import ShippedRbac
from tests.support.controlplane import ControlPlane, Options, start_control_plane
from tests.support.fixtures import run_state
from tests.support.netns import NetnsFactory
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

# Seconds; a bench must stay under 10 minutes in all. The environment override is for a quick
# check of the bench itself, not for numbers worth recording.
WINDOW = float(os.environ.get("LOCAL_CCM_BENCH_API_WINDOW", "360"))
WARM_UP = 15.0
AGENTS = {"default": (), "resync-1m": ("--resync-interval=1m",)}
RESYNC_S = {"default": 1800.0, "resync-1m": 60.0}
COUNTED = re.compile(r"^apiserver_request_total\{(.*)\} ([0-9.e+]+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_totals(plane: ControlPlane) -> Counter[str]:
    """``apiserver_request_total`` summed by "VERB resource[/subresource]" for nodes, events."""
    totals: Counter[str] = Counter()
    for line in plane.http.request("GET", "/metrics").text.splitlines():
        if match := COUNTED.match(line):
            labels = dict(LABEL.findall(match.group(1)))
            if labels.get("resource") in ("nodes", "events"):
                sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
                totals[f"{labels['verb']} {labels['resource']}{sub}"] += int(float(match.group(2)))
    return totals


def audit_requests(log: Path, offset: int, users: set[str]) -> list[dict[str, Any]]:
    """Audit events at or after byte ``offset`` made by ``users`` (all stages)."""
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode().splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    return [e for e in events if e.get("user", {}).get("username") in users]


def by_kind(events: list[dict[str, Any]], stage: str) -> dict[str, dict[str, int]]:
    """{user: {"verb resource[/sub]": count}} for events of one audit stage."""
    out: dict[str, Counter[str]] = {}
    for e in events:
        if e.get("stage") != stage:
            continue
        ref = e.get("objectRef") or {}
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        kind = f"{e['verb']} {ref.get('resource', e.get('requestURI', '?'))}{sub}"
        out.setdefault(e["user"]["username"], Counter())[kind] += 1
    return {user: dict(counts) for user, counts in out.items()}


def watch_timeouts(events: list[dict[str, Any]], user: str) -> list[int]:
    uris = [e["requestURI"] for e in events
            if e["stage"] == "RequestReceived" and e["verb"] == "watch"
            and e["user"]["username"] == user]  # fmt: skip
    return [int(m.group(1)) for u in uris if (m := re.search(r"timeoutSeconds=(\d+)", u))]


def make_tainted_node(kube: Client, name: str) -> None:
    kube.create(r.NODES, nodes.node_body(name, {}, uninitialized=True))


def wait_untainted(kube: Client, name: str) -> None:
    eventually(lambda: not is_tainted(kube.get(r.NODES, name)), timeout=60,
               message=f"the agent removed the taint of {name}")  # fmt: skip


@pytest.fixture
def audited_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Any:
    state = run_state(request.config)
    opts = Options(run_id=state.run_id, artifacts=state.artifacts,
                   fallback_tmp=Path(tempfile.gettempdir()),
                   plane=f"bench-api-{secrets.token_hex(3)}", audit=True)  # fmt: skip
    plane = start_control_plane(binaries, opts)
    try:
        yield plane
    finally:
        plane.stop()


def test_agent_api_requests_per_node_hour(
    audited_plane: ControlPlane,
    netns: NetnsFactory,
    test_artifacts: Path,
    shipped_agent_rbac: ShippedRbac,
) -> None:
    plane = audited_plane
    port = int(plane.api_url.rsplit(":", 1)[1])
    result: dict[str, Any] = {**machine_facts(), "kube_apiserver": plane.version,
                              "window_s": WINDOW, "agents": {}}  # fmt: skip
    kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="local-ccm-bench")
    users = {key: f"local-ccm-bench-{key}" for key in AGENTS}
    agents: dict[str, AgentProcess] = {}
    relays: list[LoopbackRelay] = []
    try:
        for key, flags in AGENTS.items():
            grant_agent(kube, users[key], {}, lambda *a: None, shipped_agent_rbac)
            make_tainted_node(kube, f"bench-{key}")
            up = node_uplink(netns)
            relays.append(LoopbackRelay(up.node.name, ("127.0.0.1", port)))
            kubeconfig = plane.user_kubeconfig(users[key], [])
            argv = [f"--node-name=bench-{key}", *flags]
            log = test_artifacts / f"agent-{key}.log"
            agents[key] = AgentProcess.start(up.node.name, argv, kubeconfig, log)
        for key in AGENTS:
            wait_untainted(kube, f"bench-{key}")
        time.sleep(WARM_UP)  # the Events and the watch echo of the first writes settle
        audit = plane.logs_dir / "audit.log"
        offset, before, started = audit.stat().st_size, request_totals(plane), time.monotonic()
        time.sleep(WINDOW)  # the measurement window itself: nothing may change in it
        after, elapsed = request_totals(plane), time.monotonic() - started
        window_events = audit_requests(audit, offset, set(users.values()))
        lifetime = audit_requests(audit, 0, set(users.values()))
    finally:
        codes = {key: agent.stop() for key, agent in agents.items()}
        for relay in relays:
            relay.close()
        kube.close()
    received = by_kind(window_events, "RequestReceived")
    completed = by_kind(window_events, "ResponseComplete")
    for key, user in users.items():
        count = sum(received.get(user, {}).values())
        model = simulate_requests_per_hour(RESYNC_S[key])
        result["agents"][key] = {
            "user": user,
            "flags": ["<defaults>", *AGENTS[key]],
            "window_requests": received.get(user, {}),
            "window_requests_total": count,
            "window_extrapolated_per_hour": round(count * 3600 / elapsed, 1),
            "model_per_hour": {k: round(v, 2) for k, v in model.items()},
            "model_per_hour_total": round(sum(model.values()), 1),
            "model_expected_in_window": round(sum(model.values()) * elapsed / 3600, 1),
            "watch_timeouts_s": watch_timeouts(lifetime, user),
            "lifetime_requests": by_kind(lifetime, "RequestReceived").get(user, {}),
            "exit_code": codes.get(key),
        }
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    result["cross_check"] = {
        "apiserver_request_total_delta": delta,
        "audit_response_complete_in_window": completed,
    }
    result["elapsed_s"] = round(elapsed, 1)
    write_result("api-requests", result)
    assert list(codes.values()) == [0] * len(AGENTS), result
