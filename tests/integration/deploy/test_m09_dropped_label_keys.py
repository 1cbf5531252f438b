"""M09: label keys the agent wrote under an earlier configuration, on the real apiserver with
the chart's admission policy: turning `betaLabels` off, or dropping a label domain, must not
make the policy refuse every later label write of the agent."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import Forbidden
from tests.integration.deploy.release import Release, apply_identity, bound_pod, render
from tests.support import names
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options
from tests.support.agent_scenarios import A01_ARGS, a01_network, events_with, initialised
from tests.support.chart import Helm
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
OLD_DOMAIN = "hw.example.org/rack"
OWNED = "local-ccm.io/owned-labels"


def agent_account(rel: Release) -> str:
    (agent,) = [
        o for o in rel.of("DaemonSet")
        if o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
    ]  # fmt: skip
    return str(agent["spec"]["template"]["spec"]["serviceAccountName"])


def policy_enforced(agent: Client, node: str) -> bool:
    try:
        agent.patch(r.NODES, node, {"metadata": {"labels": {"x.example/l": "1"}}},
                    patch_type="merge", dry_run=True)  # fmt: skip
    except Forbidden:
        return True
    return False


def test_m09_keys_the_new_configuration_no_longer_writes_do_not_hold_other_labels(
    *, control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    make_node: NodeFactory, netns: NetnsFactory, unique_name: str, test_namespace: str,
    test_labels: dict[str, str], kube_version: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    # Without the plane's test id, so `system:node:<name>` stays a valid certificate name.
    name = names.unique_name(request.node.originalname, secrets.token_hex(3))
    make_node(name=name, uninitialized=True)
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"rules: [{{name: a, zone: rack-a, labels: {{{OLD_DOMAIN}: a}}}}]\n")
    base = [f"--node-name={name}", f"--metadata-rules={rules}", *A01_ARGS, *FAST, *QUIET_HTTP]
    before = [*base, "--metadata-beta-labels", "--metadata-label-domains=local-ccm.io,example.org"]
    with InProcessAgent(options(before, control_plane.admin_kubeconfig), netns=ns.name):
        node = eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
    assert {ZONE: "rack-a", BETA_ZONE: "rack-a", OLD_DOMAIN: "a"}.items() <= node["metadata"][
        "labels"
    ].items()

    # The chart's defaults: no beta labels, only local-ccm.io; the agent on its pod's token.
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version)  # fmt: skip
    apply_identity(control_plane, track, rel)
    account = agent_account(rel)
    pod = bound_pod(kube, namespace=test_namespace, name=f"{unique_name[:50]}-a",
                    service_account=account, node=name, labels=test_labels)  # fmt: skip
    token = control_plane.token_kubeconfig(account, test_namespace, bound_pod=pod)
    with Client.from_kubeconfig(token, field_manager="t") as agent:
        eventually(lambda: policy_enforced(agent, name), timeout=15, message="policy enforced")
    rules.write_text("rules: [{name: a, zone: rack-b}]\n")
    with InProcessAgent(options(base, token), netns=ns.name):

        def rack_b() -> dict[str, str] | None:
            labels = kube.get(r.NODES, name)["metadata"]["labels"]
            return labels if labels.get(ZONE) == "rack-b" else None

        labels = eventually(rack_b, timeout=20, message="the zone follows the new rules")
    assert BETA_ZONE not in labels  # taken away again, as the policy allows
    assert labels[OLD_DOMAIN] == "a"  # outside the allowed domains now: left alone
    owned = json.loads(kube.get(r.NODES, name)["metadata"]["annotations"][OWNED])
    assert owned == {ZONE: "rack-b"}
    assert not events_with(kube, name, "NodeUpdateRejected")
