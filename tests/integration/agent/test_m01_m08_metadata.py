"""Node metadata labels on the real apiserver (M01-M05, M08): the agent in-process, its netlink side
in a test namespace (InternalIP 192.0.2.10, ExternalIP 198.51.100.10), rules from a file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options, taint_keys
from tests.support.agent_scenarios import (
    A01_ARGS,
    NodeRecorder,
    a01_network,
    events_with,
    initialised,
    metric_total,
)
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
RACK = "local-ccm.io/rack"
OWNED = "local-ccm.io/owned-labels"
RULES = """
rules:
  - name: rack-a
    match: {addresses: [192.0.2.0/24]}
    zone: rack-a
    labels: {local-ccm.io/rack: a}
  - name: by-name
    match: {nodeName: '^(?P<site>[a-z]+)'}
    region: '{nodeName.site}'
"""


def labels_of(kube: Client, name: str) -> dict[str, str]:
    return dict(kube.get(r.NODES, name)["metadata"].get("labels") or {})


def rules_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def replace(path: Path, text: str) -> None:
    """As the kubelet updates a ConfigMap volume: a new file renamed over the old one."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def agent_args(name: str, rules: Path) -> list[str]:
    return [f"--node-name={name}", f"--metadata-rules={rules}", *A01_ARGS, *FAST, *QUIET_HTTP]


def test_m01_labels_are_on_the_node_before_the_taint_is_removed(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    created = make_node(uninitialized=True)
    name = created["metadata"]["name"]
    rules = rules_file(tmp_path, RULES)
    with NodeRecorder(kube, name, created["metadata"]["resourceVersion"]) as recorder:
        opts = options(agent_args(name, rules), control_plane.admin_kubeconfig)
        with InProcessAgent(opts, netns=ns.name):
            node = eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
    labels = node["metadata"]["labels"]
    assert labels[ZONE] == "rack-a"
    assert labels[RACK] == "a"
    site = re.match(r"[a-z]+", name)
    assert site is not None
    assert labels[REGION] == site.group(0)
    owned = json.loads(node["metadata"]["annotations"][OWNED])
    assert owned == {RACK: "a", REGION: labels[REGION], ZONE: "rack-a"}
    tainted = [v for v in recorder.snapshot() if names.UNINITIALIZED_TAINT in taint_keys(v)]
    untainted = [v for v in recorder.snapshot() if names.UNINITIALIZED_TAINT not in taint_keys(v)]
    assert untainted, "the taint removal was not seen"
    assert ZONE in untainted[0]["metadata"]["labels"], "the taint went before the labels"
    assert all(ZONE not in (v["metadata"].get("labels") or {}) for v in tainted)


def test_m02_a_label_someone_else_set_is_kept_and_reported(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    name = make_node(uninitialized=True, labels={ZONE: "theirs"})["metadata"]["name"]
    opts = options(agent_args(name, rules_file(tmp_path, RULES)), control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=ns.name):
        node = eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
        conflict = eventually(lambda: events_with(kube, name, "MetadataLabelConflict"),
                              timeout=10, message="MetadataLabelConflict Event")  # fmt: skip
    assert node["metadata"]["labels"][ZONE] == "theirs"
    assert node["metadata"]["labels"][RACK] == "a"  # the keys that were free are written
    assert ZONE not in json.loads(node["metadata"]["annotations"][OWNED])
    assert "rack-a" in conflict[0]["message"]
    assert len(conflict) == 1


def test_m11_no_beta_twin_contradicts_a_label_someone_else_set(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    name = make_node(uninitialized=True, labels={ZONE: "theirs"})["metadata"]["name"]
    args = [*agent_args(name, rules_file(tmp_path, RULES)), "--metadata-beta-labels"]
    with InProcessAgent(options(args, control_plane.admin_kubeconfig), netns=ns.name):
        node = eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
    labels = node["metadata"]["labels"]
    assert labels[ZONE] == "theirs"
    assert "failure-domain.beta.kubernetes.io/zone" not in labels  # not the rules' "rack-a"
    assert labels["failure-domain.beta.kubernetes.io/region"] == labels[REGION]


def test_m03_a_rule_change_updates_owned_labels_only(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    name = make_node(uninitialized=True, labels={"team": "db"})["metadata"]["name"]
    rules = rules_file(tmp_path, RULES)
    opts = options(agent_args(name, rules), control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=ns.name) as running:
        eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
        # An operator takes the rack label over by hand: it is no longer the agent's.
        kube.patch(r.NODES, name, {"metadata": {"labels": {RACK: "by-hand"}}}, patch_type="merge")
        replace(rules, RULES.replace("rack-a", "rack-b").replace("rack: a", "rack: b"))

        def updated() -> dict[str, str] | None:
            labels = labels_of(kube, name)
            return labels if labels.get(ZONE) == "rack-b" else None

        labels = eventually(updated, timeout=15, message="zone follows the new rules")
        assert running.agent is not None
        assert metric_total(running.agent, "local_ccm_agent_metadata_rules_reloads_total",
                            result="loaded") == 1  # fmt: skip
    assert labels[RACK] == "by-hand"
    assert labels["team"] == "db"
    owned = json.loads(kube.get(r.NODES, name)["metadata"]["annotations"][OWNED])
    assert RACK not in owned
    assert owned[ZONE] == "rack-b"


def test_m04_invalid_rules_exit_2_listing_every_problem(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    bad = rules_file(tmp_path, """
rules:
  - name: one
    zone: 'not valid!'
    labels: {example.com/x: y}
  - match: {addresses: [300.0.0.0/8]}
""")  # fmt: skip
    done = subprocess.run(
        [str(Path(sys.executable).with_name("local-ccm")), "--node-name=n",
         f"--metadata-rules={bad}"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KUBECONFIG": str(control_plane.admin_kubeconfig)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    problems = [line for line in done.stderr.splitlines() if "--metadata-rules" in line]
    assert len(problems) >= 4, done.stderr
    text = "\n".join(problems)
    assert "not valid!" in text
    assert "example.com/x" in text
    assert "300.0.0.0/8" in text
    assert "name" in text
    assert "Traceback" not in done.stderr


def test_m05_a_bad_reload_keeps_the_last_good_rules_with_an_event_and_a_metric(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    rules = rules_file(tmp_path, RULES)
    opts = options(agent_args(name, rules), control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=ns.name) as running:
        eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
        replace(rules, "rules: [{name: broken, zone: 'a b c!'}]\n")
        invalid: list[Any] = eventually(
            lambda: events_with(kube, name, "MetadataRulesInvalid"), timeout=15,
            message="MetadataRulesInvalid Event",
        )  # fmt: skip
        assert running.agent is not None
        agent = running.agent

        assert metric_total(agent, "local_ccm_agent_metadata_rules_valid") == 0
        reloads = "local_ccm_agent_metadata_rules_reloads_total"
        assert metric_total(agent, reloads, result="invalid") == 1
    assert "a b c!" in invalid[0]["message"]
    assert labels_of(kube, name)[ZONE] == "rack-a"  # the last good rules stayed in force


def deny_label_policy(kube: Client, track: Tracker, key: str, node: str) -> None:
    """A ValidatingAdmissionPolicy refusing ``key`` on ``node`` (as a policy stricter than the
    rules would), enforced once a dry run is denied."""
    name = f"deny-{node}"[:63]
    message = f"test denies {key}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"],
                                                    "resources": ["nodes"]}]},
            "matchConditions": [{"name": "node",
                                 "expression": f"object.metadata.name == '{node}'"}],
            "validations": [{"expression": "!has(object.metadata.labels) || "
                             f"!('{key}' in object.metadata.labels)", "message": message}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }  # fmt: skip
    kube.create(r.VALIDATING_ADMISSION_POLICIES, policy)
    track(r.VALIDATING_ADMISSION_POLICIES, name)
    kube.create(r.VALIDATING_ADMISSION_POLICY_BINDINGS, binding)
    track(r.VALIDATING_ADMISSION_POLICY_BINDINGS, name)

    def denied() -> bool:
        try:
            kube.patch(r.NODES, node, {"metadata": {"labels": {key: "x"}}}, patch_type="merge",
                       dry_run=True)  # fmt: skip
        except ApiError as exc:
            return message in exc.message
        return False

    eventually(denied, timeout=30, message="the test policy is enforced")


def test_m08_labels_the_api_server_refuses_never_hold_the_taint(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory,
    track: Tracker, tmp_path: Path,
) -> None:  # fmt: skip
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    deny_label_policy(kube, track, RACK, name)
    opts = options(agent_args(name, rules_file(tmp_path, RULES)), control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=ns.name):
        node = eventually(lambda: initialised(kube, name), timeout=20, message="untainted")
        eventually(lambda: events_with(kube, name, "NodeUpdateRejected"), timeout=10,
                   message="the refused write is reported")  # fmt: skip
    assert RACK not in (node["metadata"].get("labels") or {})
