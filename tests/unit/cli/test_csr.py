"""kubelet-serving-approver's manager entry: `--csr-deny`, the shared options it reads, and
exactly the permissions the chart grants."""

from __future__ import annotations

from local_ccm import flags
from local_ccm.cli import csr, lbipam, managed, manager
from local_ccm.kube.nodes import Access


def load(*argv: str) -> csr.CsrOptions:
    parsed = flags.parse(manager.manager_flags(), list(argv), {})
    assert isinstance(parsed, flags.Parsed)
    options = csr.controller().load(parsed, ({}, (), ()))
    assert isinstance(options, managed.Managed)
    return options


def test_csr_deny_is_on_by_default_and_can_be_turned_off() -> None:
    assert load().own is True
    assert load("--csr-deny=false").own is False


def test_the_shared_settings_are_the_lifecycle_controllers() -> None:
    options = load("--kubeconfig=/k", "--leader-elect=false")
    assert options.kubeconfig == "/k"
    assert csr.controller().lease(options) is None


def test_permissions_are_the_csr_rules_and_events_only() -> None:
    group = "certificates.k8s.io"
    assert csr.permissions(load()) == [
        Access("get", "certificatesigningrequests", group),
        Access("list", "certificatesigningrequests", group),
        Access("watch", "certificatesigningrequests", group),
        Access("update", "certificatesigningrequests", group, subresource="approval"),
        Access("approve", "signers", group, name="kubernetes.io/kubelet-serving"),
        Access("create", "events", namespace="default"),
    ]


def test_a_bad_shared_flag_and_a_bad_own_flag_are_both_listed() -> None:
    argv = ["--lb-class=bad", "--not-ready-timeout=zz"]
    parsed = flags.parse(manager.manager_flags(), argv, {})
    problems = lbipam.controller().load(parsed, ({}, (), ()))
    assert isinstance(problems, list)
    assert sorted(p.flag for p in problems) == ["lb-class", "not-ready-timeout"]
