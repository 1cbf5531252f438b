"""kubelet-serving-approver's manager entry: `--csr-deny`, the shared options it reads, and
exactly the permissions the chart grants."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from local_ccm import flags
from local_ccm.cli import csr, lbipam, lifecycle, managed, manager
from local_ccm.csr.core.model import Policy
from local_ccm.kube.nodes import Access
from local_ccm.lifecycle.options import LifecycleOptions
from local_ccm.lifecycle.options import options_from as lifecycle_options
from tests.support.kubeconfigs import credentials_env


def load(*argv: str) -> csr.CsrOptions:
    parsed = flags.parse(manager.manager_flags(), list(argv), {})
    assert isinstance(parsed, flags.Parsed)
    options = csr.controller().load(parsed, ({}, (), ()))
    assert isinstance(options, managed.Managed)
    return options


def test_csr_deny_is_on_by_default_and_can_be_turned_off() -> None:
    assert load().own.deny is True
    assert load("--csr-deny=false").own.deny is False


def test_no_prefix_allow_list_and_a_367_day_bound_by_default() -> None:
    assert load().own.policy == Policy(ip_prefixes=(), max_expiration=367 * 86400)


def test_prefixes_and_the_bound_are_read_as_networks_and_seconds() -> None:
    own = load("--csr-ip-prefixes=10.0.0.0/8, fd00::/8", "--csr-max-expiration=24h").own
    assert own.policy == Policy(
        ip_prefixes=(ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")),
        max_expiration=86400,
    )
    assert load("--csr-max-expiration=0").own.policy.max_expiration == 0  # no bound


def test_prefixes_and_the_bound_come_from_the_environment_too() -> None:
    env = {"CSR_IP_PREFIXES": "192.0.2.0/24", "CSR_MAX_EXPIRATION": "1h"}
    parsed = flags.parse(manager.manager_flags(), [], env)
    assert isinstance(parsed, flags.Parsed)
    options = csr.controller().load(parsed, ({}, (), ()))
    assert isinstance(options, managed.Managed)
    assert options.own.policy == Policy((ipaddress.ip_network("192.0.2.0/24"),), 3600)


def test_the_start_up_line_shows_the_policy() -> None:
    fields = csr.controller().fields(load("--csr-ip-prefixes=10.0.0.0/8,fd00::/8"))
    assert fields == {"csr-deny": "true", "csr-ip-prefixes": "10.0.0.0/8,fd00::/8",
                      "csr-max-expiration": "8808h0m0s"}  # fmt: skip


def test_bad_prefixes_and_a_bad_bound_exit_2_listing_every_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--controllers=kubelet-serving-approver", "--csr-ip-prefixes=10.0.0.1/8,zz,fd00::/8",
            "--csr-max-expiration=-1h"]  # fmt: skip
    assert manager.main(argv, credentials_env(tmp_path)) == 2
    assert capsys.readouterr().err.splitlines() == [
        'invalid flag --csr-ip-prefixes: invalid CIDR "10.0.0.1/8": host bits set; did you '
        "mean 10.0.0.0/8?",
        'invalid flag --csr-ip-prefixes: invalid CIDR "zz": expected address/prefix (e.g. '
        "10.0.0.0/8)",
        "invalid flag --csr-max-expiration: must be >= 0, got -1h0m0s",
        "run 'local-ccm-controller-manager --help' for usage",
    ]


def test_the_shared_settings_are_the_lifecycle_controllers() -> None:
    argv = ["--leader-elect=false", "--metrics-bind-address=:9100", "--event-namespace=ev"]
    parsed = flags.parse(manager.manager_flags(), argv, {})
    assert isinstance(parsed, flags.Parsed)
    own = lifecycle_options(parsed)
    assert isinstance(own, LifecycleOptions)
    shared = csr.controller().shared(load(*argv))
    assert shared == lifecycle.shared_of(own)
    assert shared.lease is None
    assert (shared.serving.metrics_address, shared.event_namespace) == (":9100", "ev")


def test_permissions_are_the_csr_rules_the_node_watch_and_events_only() -> None:
    group = "certificates.k8s.io"
    assert csr.permissions(load()) == [
        Access("get", "certificatesigningrequests", group),
        Access("list", "certificatesigningrequests", group),
        Access("watch", "certificatesigningrequests", group),
        Access("update", "certificatesigningrequests", group, subresource="approval"),
        Access("approve", "signers", group, name="kubernetes.io/kubelet-serving"),
        Access("list", "nodes"),  # its own Node watch when it runs alone
        Access("watch", "nodes"),
        Access("create", "events", namespace="default"),
    ]


def test_a_bad_shared_flag_and_a_bad_own_flag_are_both_listed() -> None:
    argv = ["--lb-class=bad", "--not-ready-timeout=zz"]
    parsed = flags.parse(manager.manager_flags(), argv, {})
    problems = lbipam.controller().load(parsed, ({}, (), ()))
    assert isinstance(problems, list)
    assert sorted(str(p.flag) for p in problems) == ["lb-class", "not-ready-timeout"]
