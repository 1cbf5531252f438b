"""`make bench-compare`: a kubelet joining a real node, ours against the Go agent, each as a
DaemonSet from an image built here (tests/bench/compare_join.py says how a join is made).

What users feel of an agent's start is the time from the kubelet registering its Node to the
Node being initialised (the uninitialized taint gone), where the container's start weighs in;
the process-level start → taint row of test_compare.py leaves that out. A warm-up join of each
agent first (recorded, not counted: its first container start on this node), then
``BENCH_JOINS`` joins of each, interleaved. Result: ``compare-join-<stamp>.json``. Nothing is
asserted about speed; the test fails when a join could not be measured or when the wrong agent
could have initialised the Node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench import compare_join as cj
from tests.bench import join_phases as jp
from tests.bench.compare_record import LoadSampler, collect, provenance, write
from tests.bench.compare_stats import Settings
from tests.support import originals
from tests.support.binaries import Binaries
from tests.support.realnode_chart import package_chart
from tests.support.realnode_cluster import (
    Cluster,
    NodeOptions,
    missing_prerequisites,
    realnode_cluster,
)

pytestmark = [pytest.mark.compare, pytest.mark.kubelet, pytest.mark.timeout(3 * 3600)]
GO = "go-local-ccm"
# A real cluster runs the pod garbage collector: with it on, a Pod bound to a deleted Node is
# deleted after its 40 s quarantine (docs/benchmarks.md); the joins leave it nothing to do.
PODGC = "pod-garbage-collector-controller"


@pytest.fixture(scope="module")
def go_agent() -> originals.Built:
    return originals.ensure(only=(GO,))


@pytest.fixture(scope="module")
def join_cluster(
    request: pytest.FixtureRequest, binaries: Binaries, go_agent: originals.Built,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, tuple[str, str]]]:  # fmt: skip
    """The real-node tier's cluster with a restartable kubelet, the pod garbage collector and
    the Go agent's image imported beside ours; with the Go image's (repository, tag)."""
    if missing := missing_prerequisites():  # a skipped comparison would be a silent gap
        pytest.fail("the join comparison needs a real node: missing " + ", ".join(missing))
    image, ref = cj.go_image(go_agent.path(GO, "local-ccm"), tmp_path_factory.mktemp("go-image"))
    options = NodeOptions(images=(image,), restartable_kubelet=True, kcm_controllers=(PODGC,))
    with realnode_cluster(request.config, binaries, options=options) as cluster:
        yield cluster, ref


def test_compare_join(  # noqa: PLR0917 (pytest passes fixtures by name)
    join_cluster: tuple[Cluster, tuple[str, str]], binaries: Binaries, settings: Settings,
    go_agent: originals.Built, tmp_path_factory: pytest.TempPathFactory, test_artifacts: Path,
) -> None:  # fmt: skip
    cluster, go_ref = join_cluster
    helm = binaries.path("helm")
    chart = package_chart(tmp_path_factory.mktemp("chart"), helm)
    started = time.monotonic()
    with (
        cj.task_events(cluster, test_artifacts / "ctr-events.log") as ctr_log,
        LoadSampler() as load,
    ):
        bench = cj.JoinBench(cluster, helm, ctr_log)
        installs = cj.install(bench, chart, go_ref)
        warmup = [cj.run_join(bench, impl, "warmup") for impl in cj.DAEMONSET]
        joins = [cj.run_join(bench, impl, f"j{i // 2}")
                 for i, impl in enumerate(jp.join_order(settings.joins))]  # fmt: skip
    rounds: dict[str, dict[str, list[Any]]] = {}
    for join in joins:
        collect(rounds, join["impl"], jp.metric_values(join))
    write("join", binaries, cluster.plane, {
        "settings": settings.as_dict(), "originals": {"go": provenance(go_agent, GO)},
        "go_image": ":".join(go_ref), "helm_install_s": installs, "rounds": rounds,
        "warmup": warmup, "joins": joins, "loadavg_samples": load.samples,
        "wall_s": round(time.monotonic() - started, 1),
    })  # fmt: skip
    every = warmup + joins
    assert [j["other_daemonsets"] for j in every] == [[]] * len(every)  # one agent per join
    internal = ["InternalIP", cluster.node.address]
    assert [internal in map(list, j["addresses"]) for j in every] == [True] * len(every)
    assert None not in rounds["join_register_to_untaint_s"]["ours"]
    assert None not in rounds["join_register_to_untaint_s"]["go"]
