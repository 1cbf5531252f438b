"""`make bench-compare`: ours and the Go originals, side by side, on the same control planes.

For each component, `rounds` rounds of one run of ours then one run of the Go original
(interleaved, so drifting load on this shared machine hits both alike). Every run is a
fresh process; the planes are real etcd + kube-apiserver from the test binary cache, the Go
binaries come from tests/support/originals.py. Each test writes
``test-artifacts/bench/compare-<component>-<UTC stamp>.json``; `python -m
tests.bench.compare_report` turns the newest of each into docs/benchmarks.md's tables and the
plots. Nothing is asserted about speed: a test fails only when a measurement could not be
taken. Scale: tests/bench/compare_stats.py `Settings` (BENCH_* variables).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.bench import compare_agent, compare_ipam, compare_lifecycle
from tests.bench.agent_bench import node_uplink
from tests.bench.compare_record import LoadSampler, collect, provenance, write
from tests.bench.compare_stats import Settings
from tests.integration.ipam import harness as ipam_harness
from tests.support import crds, names, originals
from tests.support import resources as r
from tests.support.audit import audit_log, audited_plane
from tests.support.binaries import Binaries
from tests.support.chart import ShippedRbac
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.fixtures import run_state
from tests.support.kwok import (
    create_fake_nodes,
    fake_node_body,
    is_ready,
    loopback_address,
    start_kwok,
)
from tests.support.lifecycle_harness import apply_rbac, controller_kubeconfig
from tests.support.netns import NetnsFactory
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

pytestmark = [pytest.mark.compare, pytest.mark.timeout(3 * 3600)]
IMPLS = ("ours", "go")
FIELD_MANAGER = "local-ccm-bench"
EMPTY_WINDOW = 10.0  # s of CPU for the lifecycle controller that selects no Node


def impls(settings: Settings) -> tuple[str, ...]:
    """Ours, Go's, and with BENCH_BASELINE an earlier tree of ours, interleaved in each round."""
    return (*IMPLS, "baseline") if settings.baseline else IMPLS


# ------------------------------------------------------------------ agent
@pytest.fixture(scope="module")
def agent_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with audited_plane(request.config, binaries) as plane:
        yield plane


@contextlib.contextmanager
def agent_bench(
    plane: ControlPlane, netns: NetnsFactory, built: originals.Built, rbac: ShippedRbac,
    logs: Path, *, baseline: str = "",
) -> Iterator[compare_agent.AgentBench]:  # fmt: skip
    """The agents' namespace, its relay to `plane` and an admin client, for one test."""
    up = node_uplink(netns)
    port = int(plane.api_url.rsplit(":", 1)[1])
    with (
        Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube,
        LoopbackRelay(up.node.name, ("127.0.0.1", port)),
    ):
        yield compare_agent.AgentBench(plane, kube, audit_log(plane), up, rbac,
                                       built.path("go-local-ccm", "local-ccm"), logs,
                                       baseline)  # fmt: skip


def test_compare_agent(  # noqa: PLR0917 (pytest passes fixtures by name)
    agent_plane: ControlPlane, binaries: Binaries, netns: NetnsFactory, settings: Settings,
    built: originals.Built, shipped_agent_rbac: ShippedRbac, test_artifacts: Path,
) -> None:  # fmt: skip
    rounds: dict[str, dict[str, list[Any]]] = {}
    runs = []
    started = time.monotonic()
    with (
        agent_bench(
            agent_plane,
            netns,
            built,
            shipped_agent_rbac,
            test_artifacts,
            baseline=settings.baseline,
        ) as bench,
        LoadSampler() as load,
    ):
        for i in range(settings.rounds):
            for impl in impls(settings):
                run = compare_agent.run_agent(bench, impl, f"r{i}", idle_s=settings.agent_idle_s,
                                              changes=settings.agent_changes)  # fmt: skip
                runs.append(run)
                collect(rounds, impl, compare_agent.metric_values(run))
            for impl in compare_agent.FLOORS:  # start-up only: a few seconds each
                run = compare_agent.run_agent(bench, impl, f"r{i}", idle_s=1.0, changes=0)
                runs.append(run)
                collect(rounds, impl, compare_agent.floor_values(run))
    write("agent", binaries, agent_plane, {
        "settings": settings.as_dict(), "originals": {"go": provenance(built, "go-local-ccm")},
        "rounds": rounds, "runs": runs, "loadavg_samples": load.samples,
        "wall_s": round(time.monotonic() - started, 1),
    })  # fmt: skip
    assert [run["exit_code"] for run in runs if run["impl"] == "ours"] == [0] * settings.rounds


# ------------------------------------------------------------------ IPAM
@pytest.fixture(scope="module")
def ipam_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "compare-ipam", scale=True) as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube:
            crds.install(kube)
        yield plane


def test_compare_ipam(  # noqa: PLR0917 (pytest passes fixtures by name)
    ipam_plane: ControlPlane, binaries: Binaries, settings: Settings, built: originals.Built,
    test_artifacts: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    kube = Client.from_kubeconfig(ipam_plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    state = run_state(request.config)
    track = Tracker(kube, state.run_id)
    namespace = f"bench-ipam-{secrets.token_hex(3)}"
    labels = names.test_labels(state.run_id, request.node.nodeid)
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace, "labels": labels}})  # fmt: skip
    ipam_harness.apply_rbac(kube, track, labels, name=namespace, namespace=namespace,
                            lease_name=namespace, event_namespace="default")  # fmt: skip
    bench = compare_ipam.IpamBench(ipam_plane, kube, track, namespace,
                                   built.path("go-node-ipam-controller", "node-ipam-controller"),
                                   test_artifacts, baseline=settings.baseline)  # fmt: skip
    timeout = 60 + settings.ipam_nodes * 0.5  # 5 QPS and two writes a Node, with room
    rounds: dict[str, dict[str, list[Any]]] = {}
    runs = []
    started = time.monotonic()
    with LoadSampler() as load:
        for i in range(settings.rounds):
            same = {
                impl: compare_ipam.run_ipam(bench, impl, f"{impl}-r{i}", qps=compare_ipam.SAME_QPS,
                                            count=settings.ipam_nodes, timeout=timeout)
                for impl in impls(settings)
            }  # fmt: skip
            default = compare_ipam.run_ipam(bench, "ours", f"ours-default-r{i}", qps=(),
                                            count=settings.ipam_nodes, timeout=timeout)  # fmt: skip
            runs += [same["ours"], same["go"], default]
            collect(rounds, "ours", compare_ipam.metric_values(same["ours"], default))
            collect(rounds, "go", compare_ipam.metric_values(same["go"], None))
            if "baseline" in same:
                runs.append(same["baseline"])
                collect(rounds, "baseline", compare_ipam.metric_values(same["baseline"], None))
            for impl in compare_ipam.FLOORS:
                run = compare_ipam.run_ipam(bench, impl, f"{impl}-r{i}", qps=compare_ipam.SAME_QPS,
                                            count=settings.ipam_nodes, timeout=timeout)  # fmt: skip
                runs.append(run)
                collect(rounds, impl, compare_ipam.floor_values(run))
    track.cleanup()
    kube.close()
    write("ipam", binaries, ipam_plane, {
        "settings": settings.as_dict(),
        "originals": {"go": provenance(built, "go-node-ipam-controller")},
        "rounds": rounds, "runs": runs, "loadavg_samples": load.samples,
        "wall_s": round(time.monotonic() - started, 1),
    })  # fmt: skip


# ------------------------------------------------------------------ node-lifecycle-controller
@pytest.fixture(scope="module")
def lifecycle_plane(
    request: pytest.FixtureRequest, binaries: Binaries, settings: Settings
) -> Iterator[tuple[ControlPlane, dict[str, str]]]:
    """The scale plane with kwok and `lifecycle_nodes` Ready kwok Nodes on loopback."""
    state = run_state(request.config)
    with dedicated_plane(request.config, binaries, "compare-lifecycle", scale=True) as plane:
        kwok = start_kwok(plane, binaries, lease_seconds=200)
        labels = names.test_labels(state.run_id, "bench-compare-lifecycle")
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube:
            bodies = [fake_node_body(f"kwok-{i:05d}", labels, addresses=[
                {"type": "InternalIP", "address": loopback_address(i)}])
                for i in range(settings.lifecycle_nodes)]  # fmt: skip
            create_fake_nodes(lambda body: kube.create(r.NODES, body), bodies)
            selector = f"{names.TEST_LABEL}={labels[names.TEST_LABEL]}"

            def all_ready() -> bool:
                items = kube.list(r.NODES, label_selector=selector)["items"]
                return sum(map(is_ready, items)) >= settings.lifecycle_nodes

            eventually(all_ready, timeout=300, interval=2, message="kwok Nodes Ready")
        # Nothing writes from here on (no kube-controller-manager: the Nodes stay Ready), so the
        # apiserver's counters over a window are the controller's and the background's alone.
        kwok.child.stop()
        yield plane, labels


@pytest.mark.kwok
def test_compare_lifecycle(  # noqa: PLR0917 (pytest passes fixtures by name)
    lifecycle_plane: tuple[ControlPlane, dict[str, str]], binaries: Binaries,
    settings: Settings, built: originals.Built, netns: NetnsFactory, test_artifacts: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    plane, labels = lifecycle_plane
    state = run_state(request.config)
    kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    track = Tracker(kube, state.run_id)
    namespace = f"bench-nlc-{secrets.token_hex(3)}"
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace, "labels": labels}})  # fmt: skip
    apply_rbac(kube, track, labels, name=namespace, namespace=namespace, lease=namespace)
    link = netns.host_link(netns())
    bench = compare_lifecycle.LifecycleBench(
        plane, kube, namespace, controller_kubeconfig(plane, kube, namespace),
        built.path("go-node-lifecycle-controller", "node-lifecycle-controller"),
        NodeFactory(kube, track, labels, "bench-compare"),
        [str(link.block[i]) for i in range(5, 15)], test_artifacts, settings.baseline,
    )  # fmt: skip
    rounds: dict[str, dict[str, list[Any]]] = {}
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    with LoadSampler() as load:
        background = compare_lifecycle.window(plane, None, settings.lifecycle_window_s)
        for i in range(settings.rounds):
            for impl in impls(settings):
                empty = compare_lifecycle.run_empty(bench, impl, f"r{i}", EMPTY_WINDOW)
                run = compare_lifecycle.run_lifecycle(
                    bench, impl, f"r{i}", window_s=settings.lifecycle_window_s,
                    background=background, timeout_s=settings.lifecycle_timeout_s,
                    phase_s=compare_lifecycle.deletion_phase(i, settings.rounds),
                )  # fmt: skip
                runs.append({**run, "empty": empty})
                collect(rounds, impl, compare_lifecycle.metric_values(run, empty))
    track.cleanup()
    kube.close()
    write("lifecycle", binaries, plane, {
        "settings": settings.as_dict(),
        "originals": {"go": provenance(built, "go-node-lifecycle-controller")},
        "background": background, "rounds": rounds, "runs": runs,
        "loadavg_samples": load.samples, "wall_s": round(time.monotonic() - started, 1),
    })  # fmt: skip
    deleted = rounds["lifecycle_timeout_to_deleted_s"]
    assert all(v is not None for v in deleted["ours"]), runs
