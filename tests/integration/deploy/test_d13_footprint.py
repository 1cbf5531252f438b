"""D13 — footprint: the real agent under the original chart's CPU limit.

The unprivileged ``local-ccm`` binary (pattern 1, as in tests/integration/agent/
test_a28_unprivileged.py) runs for a real Node of the session's control plane, with metrics
and health on (the defaults, inside its namespace), started inside a cpu cgroup with the CFS
quota a kubelet sets for ``limits.cpu: 100m`` (tests/support/cgroup.py). The acceptance bounds
are asserted, not timings: ``/readyz`` 200 within 30 s of the spawn, and in the steady state of
agent scenario A15 a VmRSS of at most 32 MiB. ``make bench`` measures the numbers
(tests/bench/test_agent_cold_start.py, docs/benchmarks.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support.agent_fixtures import A01Agent
from tests.support.agent_process import METRICS_PORT
from tests.support.cgroup import A15_FLAGS, cpu_cgroup, seconds_to_ready, steady, vm_mib

pytestmark = pytest.mark.netns

LIMIT_MILLICORES = 100  # the original chart's limits.cpu
READY_BOUND_S = 30.0  # D13, under the 100m limit
RSS_BOUND_MIB = 32.0  # D13, metrics on (the target of 25 MiB is reported by the bench)


# The 30 s readiness bound, then up to 30 s each for initialisation, Events and five 1 s
# ticks of an agent that gets 0.1 CPU on a shared 2-core machine, and the stop.
@pytest.mark.timeout(180)
def test_d13_agent_under_100m_is_ready_within_30s_and_steady_rss_at_most_32mib(
    a01_agent: A01Agent, kube: Client
) -> None:
    name, agent, _ = a01_agent(A15_FLAGS)
    with cpu_cgroup(LIMIT_MILLICORES) as cgroup:
        agent.prefix = cgroup.prefix
        try:
            ready_s = seconds_to_ready(agent, timeout=READY_BOUND_S, interval=0.1)
            assert cgroup.holds(agent.pid), Path(f"/proc/{agent.pid}/cgroup").read_text()
            steady(agent, kube, name)
            agent.metrics(METRICS_PORT)  # a scrape, as Prometheus would, before reading memory
            rss = vm_mib(agent)
            throttled = cgroup.stat()["nr_throttled"]
        finally:
            agent.stop()
    print(f"D13 under {LIMIT_MILLICORES}m: ready {ready_s:.2f} s, steady VmRSS {rss:.1f} MiB")
    assert ready_s <= READY_BOUND_S
    assert throttled > 0, "the quota never bit: the limit did not apply"
    assert rss <= RSS_BOUND_MIB, f"steady VmRSS {rss:.1f} MiB > {RSS_BOUND_MIB} MiB"
