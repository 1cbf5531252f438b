"""The real-node demo's pure parts (tests/support/demo_show.py): the lines it prints for a Node,
a CSR, a Pod and a Service, and when dist/'s chart is up to date."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.demo_show import (
    chart_is_current,
    describe_csr,
    describe_node,
    describe_pod,
    describe_service,
    is_initialised,
)

REGISTERED = {
    "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1",
                                          "kubernetes.io/os": "linux"}},
    "spec": {"taints": [
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true",
         "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
    "status": {"addresses": [{"type": "Hostname", "address": "n1"}],
               "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                               "message": "container runtime network not ready"}]},
}  # fmt: skip
INITIALISED = {
    "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1",
                                          "topology.kubernetes.io/zone": "z"}},
    "spec": {"podCIDRs": ["192.0.2.128/28"]},
    "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.10"},
                             {"type": "Hostname", "address": "n1"}],
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                               "message": "kubelet is posting ready status"}]},
}  # fmt: skip


def test_a_registered_node_shows_its_taints_and_nothing_the_kubelet_did_not_write() -> None:
    assert describe_node(REGISTERED) == [
        "  addresses: Hostname n1",
        "  taints:    node.cloudprovider.kubernetes.io/uninitialized:NoSchedule, "
        "node.kubernetes.io/not-ready:NoSchedule",
        "  labels:    (none but the kubelet's own)",
        "  podCIDRs:  (none)",
        "  Ready:     False (KubeletNotReady: container runtime network not ready)",
    ]
    assert not is_initialised(REGISTERED)


def test_an_initialised_node_shows_addresses_labels_and_pod_cidrs() -> None:
    assert describe_node(INITIALISED) == [
        "  addresses: InternalIP 192.0.2.10, Hostname n1",
        "  taints:    (none)",
        "  labels:    topology.kubernetes.io/zone=z",
        "  podCIDRs:  192.0.2.128/28",
        "  Ready:     True (KubeletReady: kubelet is posting ready status)",
    ]
    assert is_initialised(INITIALISED)


def test_csr_pod_and_service_lines() -> None:
    csr = {"metadata": {"name": "csr-1"}, "spec": {"username": "system:node:n1"},
           "status": {"conditions": [{"type": "Approved", "reason": "KubeletServingApproved"}],
                      "certificate": "LS0t"}}  # fmt: skip
    assert describe_csr(None) == ["  serving CSR: (none)"]
    assert describe_csr(csr) == [
        "  serving CSR csr-1 from system:node:n1: Approved by KubeletServingApproved, signed"
    ]
    pod = {"metadata": {"name": "demo"}, "spec": {}, "status": {"phase": "Pending"}}
    assert describe_pod(pod) == ["  Pod demo on (unbound): Pending, podIP (none)"]
    svc = {"metadata": {"name": "demo"}, "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9"},
           "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.241"}]}}}  # fmt: skip
    assert describe_service(svc) == [
        "  Service demo type LoadBalancer: clusterIP 10.96.0.9, loadBalancer ingress 203.0.113.241"
    ]


def test_a_packaged_chart_is_current_only_when_no_chart_file_is_newer(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    values, template = chart / "values.yaml", chart / "templates" / "a.yaml"
    packaged = tmp_path / "local-ccm-0.4.0.tgz"
    for path, when in ((values, 100), (template, 200), (packaged, 300)):
        path.write_text("x")
        os.utime(path, (when, when))
    assert chart_is_current(packaged, chart)
    os.utime(template, (301, 301))
    assert not chart_is_current(packaged, chart)
