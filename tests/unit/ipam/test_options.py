"""node-ipam-controller's flags and environment."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from local_ccm.ipam.options import IpamOptions, resolve_resource_lock_env
from local_ccm.validate import BindAddress
from tests.support.options import load_ipam as load_options

NS = {"POD_NAMESPACE": "kube-system"}


def ok(*argv: str, env: dict[str, str] | None = None) -> IpamOptions:
    loaded = load_options(list(argv), {**NS, **(env or {})})
    assert isinstance(loaded, IpamOptions), [str(p) for p in loaded]
    return loaded


def problems(*argv: str, env: dict[str, str] | None = None) -> list[str]:
    loaded = load_options(list(argv), {**NS, **(env or {})})
    assert isinstance(loaded, list), loaded
    return [str(p) for p in loaded]


def test_defaults_are_upstreams() -> None:
    o = ok()
    assert (o.election.lease_duration, o.election.renew_deadline, o.election.retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert (o.election.lock, o.election.lease_name, o.election.namespace) == (
        "leases", "node-ipam-controller", "kube-system",
    )  # fmt: skip
    assert o.election.enabled is True
    assert o.web_bind == BindAddress(None, 8081)
    # Not upstream's: /metrics leaves the plain web server for HTTPS with authentication.
    assert (o.metrics_mode, str(o.metrics_bind), o.metrics_secure) == ("separate", ":8094", True)
    assert o.metrics_cert_dir == ""
    assert (o.mask_v4, o.mask_v6, o.cluster_cidrs, o.reserved) == (24, 64, (), ())
    assert (o.concurrent_node_syncs, o.status_interval, o.reuse_delay) == (20, 5.0, 0.0)
    assert (o.qps, o.burst, o.event_namespace, o.log_format, o.verbosity) == (
        50.0, 100, "default", "text", 0,
    )  # fmt: skip


def test_flag_beats_environment_beats_default() -> None:
    env = {"IPAM_LEASE_DURATION": "20s", "IPAM_RENEW_DEADLINE": "12s"}
    o = ok("--leader-elect-lease-duration=30s", env=env)
    assert (o.election.lease_duration, o.election.renew_deadline) == (30.0, 12.0)


def test_environment_variables_of_upstream_and_new_ones() -> None:
    env = {
        "IPAM_KUBECONFIG": "/k", "IPAM_API_SERVER_URL": "https://192.0.2.1:6443",
        "IPAM_ENABLE_LEADER_ELECTION": "F", "IPAM_RESOURCE_NAME": "lock",
        "IPAM_CLUSTER_CIDR": "10.96.0.0/12,fd00::/112", "IPAM_NODE_CIDR_MASK_SIZE_IPV6": "120",
        "IPAM_RESERVED_CIDRS": "10.96.0.0/24", "IPAM_LOG_FORMAT": "json",
    }  # fmt: skip
    o = ok(env=env)
    assert (o.kubeconfig, o.apiserver, o.election.enabled, o.election.lease_name) == (
        "/k", "https://192.0.2.1:6443", False, "lock",
    )  # fmt: skip
    assert o.cluster_cidrs == (ip_network("10.96.0.0/12"), ip_network("fd00::/112"))
    assert (o.mask_v6, o.reserved, o.log_format) == (120, (ip_network("10.96.0.0/24"),), "json")


def test_single_dash_and_space_separated_values() -> None:
    o = ok("-cluster-cidr", "10.0.0.0/16", "-node-cidr-mask-size=20")
    assert (o.cluster_cidrs, o.mask_v4) == ((ip_network("10.0.0.0/16"),), 20)


def test_i36_four_problems_one_line_each() -> None:
    lines = problems(
        "--leader-elect-resource-lock=configmaps", "--cluster-cidr=10.0.0.0/8,10.1.0.0/16",
        "--node-cidr-mask-size-ipv4=40", "--bogus",
    )  # fmt: skip
    assert len(lines) == 4, lines
    assert any("--bogus" in line for line in lines)
    assert any("leader-elect-resource-lock" in line and "configmaps" in line for line in lines)
    assert any("--cluster-cidr" in line for line in lines)
    assert any("--node-cidr-mask-size-ipv4" in line and "40" in line for line in lines)


@pytest.mark.parametrize(
    ("value", "retry", "lock"),
    [("3s", 3.0, "leases"), ("leases", 2.0, "leases"), ("endpointsleases", 2.0, "leases")],
)
def test_ipam_resource_lock_rule(value: str, retry: float, lock: str) -> None:
    o = ok(env={"IPAM_RESOURCE_LOCK": value})
    assert (o.election.retry_period, o.election.lock) == (retry, lock)
    assert o.warnings, "a deprecation or interpretation WARNING is logged"


def test_ipam_resource_lock_loses_to_the_new_variable() -> None:
    env = {"IPAM_RESOURCE_LOCK": "3s", "IPAM_LEADER_ELECT_RETRY_PERIOD": "1s"}
    assert ok(env=env).election.retry_period == 1.0


def test_ipam_resource_lock_garbage_is_exit_2() -> None:
    (line,) = problems(env={"IPAM_RESOURCE_LOCK": "foo"})
    assert line.startswith("invalid environment variable IPAM_RESOURCE_LOCK")


def test_resource_lock_env_rewrite_is_pure() -> None:
    env = {"IPAM_RESOURCE_LOCK": "configmaps"}
    rewritten, warnings, found = resolve_resource_lock_env(env)
    assert rewritten == {"IPAM_RESOURCE_LOCK_NAME": "configmaps"}
    assert warnings
    assert not found
    assert env == {"IPAM_RESOURCE_LOCK": "configmaps"}


def test_removed_lock_types_are_rejected_and_migration_ones_warn() -> None:
    assert "no longer supported" in problems("--leader-elect-resource-lock=endpoints")[0]
    o = ok("--leader-elect-resource-lock=configmapsleases")
    assert o.election.lock == "leases"
    assert o.warnings


def test_lease_namespace_required_with_leader_election() -> None:
    loaded = load_options([], {})
    assert isinstance(loaded, list)
    assert "leader-elect-namespace" in str(loaded[0])
    assert isinstance(load_options(["--enable-leader-election=false"], {}), IpamOptions)
    assert ok("--leader-elect-namespace=ipam").election.namespace == "ipam"


def test_election_durations_are_checked_together() -> None:
    lines = problems("--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=6s")
    assert lines == [
        "invalid leader election durations: lease duration must be greater than renew deadline"
    ]
    assert "must be > 0" in problems("--leader-elect-retry-period=0s")[0]


def test_election_durations_are_not_ordered_when_election_is_off() -> None:
    """node-ipam-controller never builds its elector with --enable-leader-election=false, so
    leftover IPAM_* durations in any order start it; they are still parsed."""
    env = {"IPAM_LEASE_DURATION": "5s", "IPAM_RENEW_DEADLINE": "20s"}
    o = ok("--enable-leader-election=false", env=env)
    assert (o.election.enabled, o.election.renew_deadline) == (False, 20.0)
    assert problems("--enable-leader-election=false", "--leader-elect-retry-period=2") == [
        'invalid flag --leader-elect-retry-period: missing unit in duration "2"; did you mean 2s?'
    ]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--cluster-cidr=10.0.0.0/8,fd00::/64,10.1.0.0/16"], "at most one IPv4"),
        (["--cluster-cidr=10.0.0.1/8"], "host bits"),
        (["--cluster-cidr=10.0.0.0/16", "--node-cidr-mask-size-ipv4=8"], "shorter than"),
        (["--cluster-cidr=fd00::/64", "--node-cidr-mask-size-ipv6=120"], "65536"),
        (["--cluster-cidr=10.0.0.0/8,fd00::/56", "--node-cidr-mask-size=24"], "single-stack"),
        (
            [
                "--cluster-cidr=10.0.0.0/16",
                "--node-cidr-mask-size=24",
                "--node-cidr-mask-size-ipv4=25",
            ],
            "cannot be combined with --node-cidr-mask-size-ipv4",
        ),
        (["--service-cluster-ip-range=10.0.0.0/24,10.1.0.0/24"], "one per family"),
        (["--reserved-cidrs=nonsense"], "reserved-cidrs"),
        (["--concurrent-node-syncs=0"], "at least 1"),
        (["--cidr-reuse-delay=-1s"], ">= 0"),
        (["--status-update-interval=0s"], "> 0"),
        (["--health-probe-address=8081"], "health-probe-address"),
        (["--log-format=xml"], "not one of"),
        (["--event-namespace=Bad_NS"], "event-namespace"),
        (["--v=-1"], "0 or more"),
    ],
)
def test_every_rule_of_12_4(argv: list[str], fragment: str) -> None:
    lines = problems(*argv)
    assert len(lines) == 1, lines
    assert fragment in lines[0], lines


def test_single_stack_mask_applies_to_its_family() -> None:
    assert ok("--cluster-cidr=fd00::/104", "--node-cidr-mask-size=120").mask_v6 == 120


def test_health_probe_address_wins_over_webserver_bind_address() -> None:
    o = ok("--webserver-bind-address=127.0.0.1:9000", "--health-probe-address=127.0.0.1:9001")
    assert o.web_bind == BindAddress(ip_network("127.0.0.1/32").network_address, 9001)
    assert ok("--webserver-bind-address=127.0.0.1:9000").web_bind.port == 9000  # type: ignore[union-attr]


def test_an_empty_health_probe_address_is_upstreams_default_not_an_address() -> None:
    """Upstream uses --health-probe-address only when it is not empty (its default is empty),
    so `--health-probe-address=` leaves the web server on --webserver-bind-address."""
    o = ok("--webserver-bind-address=127.0.0.1:9000", "--health-probe-address=")
    assert (o.web_flag, o.web_bind.port) == ("webserver-bind-address", 9000)  # type: ignore[union-attr]
    assert ok("--health-probe-address=").web_bind.port == 8081  # type: ignore[union-attr]


def test_an_empty_leader_elect_namespace_is_pod_namespace_as_upstream() -> None:
    """Upstream's lockNamespace: an empty --leader-elect-namespace falls back to
    POD_NAMESPACE; without one it is still refused."""
    assert ok("--leader-elect-namespace=").election.namespace == NS["POD_NAMESPACE"]
    loaded = load_options(["--leader-elect-namespace="], {})
    assert isinstance(loaded, list)
    assert "required with leader election" in str(loaded[0])
    assert "required with leader election" in problems("--leader-elect-resource-namespace=")[0]


def test_metrics_on_the_web_server_separately_or_off() -> None:
    assert ok("--metrics-bind-address=0").metrics_mode == "off"
    separate = ok("--metrics-bind-address=127.0.0.1:9090")
    assert separate.metrics_mode == "separate"
    assert separate.metrics_bind is not None


def test_plain_metrics_keep_upstreams_single_web_server() -> None:
    plain = ok("--metrics-secure=false")
    assert (plain.metrics_mode, plain.metrics_bind, plain.metrics_secure) == ("web", None, False)
    assert ok(env={"IPAM_METRICS_SECURE": "false"}).metrics_mode == "web"
    explicit = ok("--metrics-secure=false", "--metrics-bind-address=:8090")
    assert (explicit.metrics_mode, str(explicit.metrics_bind)) == ("separate", ":8090")
    assert not explicit.metrics_secure


def test_secure_metrics_cannot_share_the_health_probes_port() -> None:
    (line,) = problems("--metrics-bind-address=:8081")
    assert "--metrics-bind-address" in line
    assert "must differ from --webserver-bind-address" in line
    (line,) = problems("--health-probe-address=:9000", "--metrics-bind-address=:9000")
    assert "must differ from --health-probe-address" in line
    assert ok("--metrics-bind-address=0").metrics_secure is False  # nothing to secure
    assert ok("--metrics-cert-dir=/certs").metrics_cert_dir == "/certs"


def test_problems_name_the_environment_variable_when_it_was_the_source() -> None:
    (line,) = problems(env={"IPAM_CONCURRENT_NODE_SYNCS": "0"})
    assert line.startswith("invalid environment variable IPAM_CONCURRENT_NODE_SYNCS")


def test_legacy_selector_terms_warn() -> None:
    o = ok("--legacy-and-selector-terms")
    assert o.legacy_and_terms
    assert any("deprecated" in w for w in o.warnings)


def test_event_namespace_other_than_default_is_refused_with_the_reason() -> None:
    # The API server answers 422 to a core/v1 Event about a cluster-scoped object anywhere
    # but `default`, so the flag is checked at start-up instead of losing every Event.
    assert ok("--event-namespace=default").event_namespace == "default"
    (flag_problem,) = problems("--event-namespace=kube-system")
    assert flag_problem.startswith("invalid flag --event-namespace")
    assert "only in namespace 'default'" in flag_problem
    (env_problem,) = problems(env={"IPAM_EVENT_NAMESPACE": "ipam"})
    assert env_problem.startswith("invalid environment variable IPAM_EVENT_NAMESPACE")
