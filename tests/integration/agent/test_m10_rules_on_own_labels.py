"""M10: a rule that matches on a label the rules themselves set, on the real apiserver. The
agent must settle after one write, not flip the label on every pass (before, such a rule made
about fifty PATCHes a second, without end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options
from tests.support.agent_scenarios import A01_ARGS, a01_network, hold, initialised, patches
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns

KIND = "local-ccm.io/kind"
RULES = """
rules:
  - name: refine
    match: {labels: {local-ccm.io/kind: '^generic$'}}
    labels: {local-ccm.io/kind: 'refined-{cpu.count}'}
  - name: base
    labels: {local-ccm.io/kind: generic}
"""


def test_m10_a_rule_on_the_agents_own_label_settles(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    args = [f"--node-name={name}", f"--metadata-rules={rules}", *A01_ARGS, *FAST, *QUIET_HTTP]
    with InProcessAgent(options(args, control_plane.admin_kubeconfig), netns=ns.name) as running:
        node = eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
        assert running.agent is not None
        agent = running.agent
        before = patches(agent)
        rv = node["metadata"]["resourceVersion"]
        hold(3, lambda: kube.get(r.NODES, name)["metadata"]["resourceVersion"] == rv,
             what="the Node unchanged")  # fmt: skip
        assert patches(agent) == before
    assert node["metadata"]["labels"][KIND] == "generic"  # its own label is not a rule's input
