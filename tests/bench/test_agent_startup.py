"""Agent benchmark: process start -> taint removed (docs/benchmarks.md).

Seven runs, each a fresh tainted Node and a fresh ``local-ccm`` process with default flags
(metrics and health servers on, in its own namespace) started with ``ip netns exec`` and run
as the image runs it (``PYTHONOPTIMIZE=2`` with level-2 .pyc files). The clock starts just
before the spawn and stops when the admin watch delivers the first Node version without the
``uninitialized`` taint. It covers interpreter start-up and imports, flag validation, the
kubeconfig, the watch that starts with the Node's state, the first pass, the status PATCH and
the taint PATCH. The agent's own start-up log line splits the total into "before the first log
line" (interpreter, imports, flags) and the rest.
"""

from __future__ import annotations

import re
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from tests.bench.agent_bench import (
    AgentIdentity,
    AgentProcess,
    NodeWatcher,
    addresses_of,
    is_tainted,
    machine_facts,
    node_uplink,
    write_result,
)
from tests.support.cleanup import NodeFactory
from tests.support.netns import NetnsFactory, Uplink
from tests.support.relay import LoopbackRelay

RUNS = 7
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def first_log_time(log: Path) -> float | None:
    """Wall-clock time (epoch seconds) of the agent's first log line."""
    for line in log.read_text().splitlines():
        if match := LOG_TIME.match(line):
            return datetime.fromisoformat(match.group(1) + "+00:00").timestamp()
    return None


def one_run(
    kube: Client, make_node: NodeFactory, up: Uplink, identity: AgentIdentity, log: Path
) -> dict[str, Any]:
    node = make_node(uninitialized=True)
    name, rv = node["metadata"]["name"], node["metadata"]["resourceVersion"]
    with NodeWatcher(kube, name, rv) as watcher:
        wall = time.time()
        agent = AgentProcess.start(up.node.name, [f"--node-name={name}"], identity.kubeconfig, log)
        try:
            addressed = watcher.wait_for(lambda n: bool(addresses_of(n)), timeout=60)
            untainted = watcher.wait_for(lambda n: not is_tainted(n), timeout=60)
        finally:
            code = agent.stop()
    logged = first_log_time(log)
    return {
        "node": name,
        "start_to_addresses_s": round(addressed - agent.started, 3),
        "start_to_untaint_s": round(untainted - agent.started, 3),
        "start_to_first_log_line_s": round(logged - wall, 3) if logged else None,
        "exit_code": code,
    }


def test_agent_start_to_untaint(
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    agent_identity: AgentIdentity,
    test_artifacts: Path,
) -> None:
    result: dict[str, Any] = {**machine_facts(), "kube_apiserver": agent_identity.kube_version,
                              "flags": ["<defaults>"], "runs": RUNS}  # fmt: skip
    up = node_uplink(netns)
    with LoopbackRelay(up.node.name, ("127.0.0.1", agent_identity.api_port)):
        runs = [
            one_run(kube, make_node, up, agent_identity, test_artifacts / f"agent-{i}.log")
            for i in range(RUNS)
        ]
    totals = [r["start_to_untaint_s"] for r in runs]
    first_lines = [r["start_to_first_log_line_s"] for r in runs if r["start_to_first_log_line_s"]]
    result["runs_detail"] = runs
    result["summary"] = {
        "start_to_untaint_median_s": round(statistics.median(totals), 3),
        "start_to_untaint_min_s": min(totals),
        "start_to_untaint_max_s": max(totals),
        "start_to_addresses_median_s": statistics.median(r["start_to_addresses_s"] for r in runs),
        "start_to_first_log_line_median_s": statistics.median(first_lines) if first_lines else None,
    }
    write_result("startup", result)
    assert [r["exit_code"] for r in runs] == [0] * RUNS, result
