"""L2 announcement failover over 20 takeovers (docs/benchmarks.md, "L2 announcement failover").

The L2 scenarios' segment (tests/integration/announce): three Nodes on a bridge, each with a
real `local-ccm --l2-announce` in its namespace, the real apiserver and service-lb-ipam, a
client. One IPv4 address; 20 times: the client's neighbour entry names the holder, its agent is
killed (SIGKILL: no release, its Lease must expire), and two clocks run from the kill — to the
Lease naming another Node (read every 50 ms), and to the client kernel's entry showing that
Node's MAC (read every 50 ms; a stale entry is probed, as a client sending traffic would). The
killed agent is started again before the next round. Median and worst of each are printed and
written (test-artifacts/bench). ``BENCH_L2_TAKEOVERS`` changes the count.

    unshare --net sh -c 'ip link set lo up && exec .venv/bin/python -m pytest \
        -p no:cacheprovider -m bench -s tests/bench/test_l2_failover.py'
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest

from local_ccm.announce.core.hold import Timings
from local_ccm.kube.client import Client
from tests.bench.agent_bench import machine_facts, write_result
from tests.integration.announce.conftest import kill, l2_rbac, l2_world, restart
from tests.integration.announce.test_l2_scenarios import (
    POOL4,
    POOL6,
    addresses,
    answered_by,
    moved_from,
)
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

TAKEOVERS = int(os.environ.get("BENCH_L2_TAKEOVERS", "20"))
POLL = 0.05
GIVE_UP = 30.0

pytestmark = pytest.mark.timeout(60 + TAKEOVERS * 60)


def test_l2_failover_over_takeovers(
    *,
    control_plane: ControlPlane,
    kube: Client,
    crds: object,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
    helm_binary: Path,
) -> None:
    facts = machine_facts()
    to_entry: list[float] = []
    to_lease: list[float] = []
    with l2_world(control_plane=control_plane, kube=kube, make_node=make_node, netns=netns,
                  track=track, namespace=test_namespace, labels=test_labels,
                  artifacts=test_artifacts, rbac=l2_rbac(helm_binary)) as world:  # fmt: skip
        world.pool(POOL4, POOL6)
        world.space.service("bench", ipFamilies=["IPv4"])
        (vip,) = addresses(world, "bench", 1)
        for number in range(TAKEOVERS):
            holder = answered_by(world, vip)
            eventually(lambda h=holder: moved_from(world, vip, None) is h, timeout=10,  # type: ignore[misc]
                       message="the client's entry names the holder")  # fmt: skip
            start = time.monotonic()
            kill(holder)
            lease = entry = None
            while (lease is None or entry is None) and time.monotonic() - start < GIVE_UP:
                now = time.monotonic() - start
                if lease is None and world.holder(vip) not in (holder.name, "", None):
                    lease = now
                if entry is None and moved_from(world, vip, holder) is not None:
                    entry = time.monotonic() - start
                time.sleep(POLL)
            assert lease is not None, f"round {number}: no new Lease holder in {GIVE_UP}s"
            assert entry is not None, f"round {number}: the client's entry did not move"
            to_lease.append(lease)
            to_entry.append(entry)
            print(f"round {number + 1}/{TAKEOVERS}: {holder.name} killed; Lease {lease:.2f}s, "
                  f"client's entry {entry:.2f}s")  # fmt: skip
            restart(holder)
    timings = Timings()
    result = {
        **facts,
        "takeovers": TAKEOVERS,
        "timings": {"lease_duration": timings.lease_duration,
                    "renew_period": timings.renew_period,
                    "renew_deadline": timings.renew_deadline,
                    "skew_margin": timings.skew_margin, "rank_step": timings.rank_step},
        "kill_to_client_entry_s": summary(to_entry),
        "kill_to_new_lease_holder_s": summary(to_lease),
    }  # fmt: skip
    write_result("l2-failover", result)


def summary(values: list[float]) -> dict[str, object]:
    return {
        "median": round(statistics.median(values), 3),
        "worst": round(max(values), 3),
        "best": round(min(values), 3),
        "all": [round(v, 3) for v in values],
    }
