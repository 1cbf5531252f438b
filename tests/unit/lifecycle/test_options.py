"""node-lifecycle-controller's command line: flag defaults and every validation rule, all
problems reported at once."""

from __future__ import annotations

import pytest

from local_ccm.flags import Problem
from local_ccm.lifecycle.core.model import ICMP, tcp
from local_ccm.lifecycle.options import LifecycleOptions, startup_fields
from local_ccm.validate import CountOrPercent
from tests.support.options import load_lifecycle as load_options


def ok(*argv: str, env: dict[str, str] | None = None) -> LifecycleOptions:
    loaded = load_options(list(argv), env or {})
    assert isinstance(loaded, LifecycleOptions), loaded
    return loaded


def problems(*argv: str) -> list[str]:
    loaded = load_options(list(argv), {})
    assert isinstance(loaded, list), "expected problems"
    return [str(p) for p in loaded if isinstance(p, Problem)]


def test_defaults_match_the_original_and_the_spec() -> None:
    o = ok()
    assert o.kubeconfig == ""
    assert o.node_selector == ""
    assert o.scope.selector is None
    assert o.scope.watch_autoscaler_taint
    assert o.scope.protected == ()
    assert o.not_ready_timeout == 300
    assert o.probe.timeout == 5
    assert o.probe.count == 3
    assert o.interval == 30
    assert not o.dry_run
    assert o.verbosity == 0
    e = o.election
    assert (e.enabled, e.lease_name) == (True, "node-lifecycle-controller")
    assert e.namespace == "kube-system"
    assert (e.lease_duration, e.renew_deadline, e.retry_period) == (15, 10, 2)
    s = o.settings
    assert s.max_unhealthy == CountOrPercent(40, percent=True)
    assert s.max_deletions == 1
    assert s.kinds == (ICMP,)
    assert not s.probe_all_addresses
    assert s.families == ("ipv4", "ipv6")
    assert o.probe.interval == 1
    assert o.icmp_mode == "auto"
    assert o.probe.concurrency == 64
    assert s.self_check
    assert s.self_check_sample == 3
    assert o.scope.own_node is None
    assert not s.out_of_service_taint
    assert o.out_of_service_timeout == 300
    assert str(o.metrics_bind) == ":8090"
    assert str(o.health_bind) == ":8091"
    assert o.metrics_secure
    assert o.metrics_cert_dir == ""
    assert o.log_format == "text"
    assert o.event_namespace == "default"


def test_environment_fills_namespace_and_node_name_and_flags_win() -> None:
    env = {"POD_NAMESPACE": "ops", "NODE_NAME": "cp-1"}
    assert ok(env=env).election.namespace == "ops"
    assert ok(env=env).scope.own_node == "cp-1"
    assert ok("--namespace=other", env=env).election.namespace == "other"


def test_a_node_name_no_node_can_have_is_refused_from_flag_or_environment() -> None:
    """It names the Node never deleted: one that cannot exist would protect none."""
    for argv, env in ((["--node-name=Bad_"], {}), ([], {"NODE_NAME": "-5"})):
        loaded = load_options(argv, env)
        assert isinstance(loaded, list)
        [line] = [str(p) for p in loaded]
        assert "NODE_NAME" in line or "--node-name" in line
        assert "DNS-1123 subdomain" in line


def test_the_five_problems_of_l32_are_five_lines() -> None:
    lines = problems("--ping-count=-1", "--reconcile-interval=0", "--max-unhealthy=150%",
                     "--probe=udp:1", "--bogus")  # fmt: skip
    assert len(lines) == 5
    for flag in ("--ping-count", "--reconcile-interval", "--max-unhealthy", "--probe", "--bogus"):
        assert sum(flag in line for line in lines) == 1, (flag, lines)


@pytest.mark.parametrize(
    "flag",
    ["not-ready-timeout", "ping-timeout", "ping-interval", "reconcile-interval",
     "out-of-service-timeout", "leader-elect-lease-duration", "leader-elect-renew-deadline",
     "leader-elect-retry-period"],
)  # fmt: skip
def test_durations_must_be_positive(flag: str) -> None:
    assert any(f"--{flag}:" in line for line in problems(f"--{flag}=0"))


@pytest.mark.parametrize(
    ("arg", "flag"),
    [("--self-check-sample=0", "self-check-sample"), ("--probe-concurrency=0", "probe-concurrency"),
     ("--max-deletions-per-interval=0", "max-deletions-per-interval"), ("--v=-1", "v")],
)  # fmt: skip
def test_counts_have_lower_bounds(arg: str, flag: str) -> None:
    assert any(f"--{flag}:" in line for line in problems(arg))


@pytest.mark.parametrize("value", ["-1", "101%", "x", "40.5%", "%"])
def test_max_unhealthy_is_a_count_or_a_percentage(value: str) -> None:
    assert problems(f"--max-unhealthy={value}")


def test_max_unhealthy_accepts_counts_and_percentages() -> None:
    assert ok("--max-unhealthy=0").settings.max_unhealthy == CountOrPercent(0, percent=False)
    assert ok("--max-unhealthy=100%").settings.max_unhealthy == CountOrPercent(100, percent=True)


def test_lease_durations_follow_client_go() -> None:
    assert any("renew-deadline" in p for p in problems("--leader-elect-lease-duration=10s"))
    lines = problems("--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s")
    assert any("1.2" in p for p in lines)
    assert ok("--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
              "--leader-elect-retry-period=0.5s").election.renew_deadline == 3  # fmt: skip


def test_probe_kinds() -> None:
    assert ok("--probe=tcp:10250,icmp").settings.kinds == (tcp(10250), ICMP)
    assert ok("--probe=none").unprobed
    assert ok("--ping-count=0").unprobed  # no --probe means unprobed mode
    assert ok("--ping-count=0", "--probe=tcp:10250").settings.kinds == (tcp(10250),)
    assert any("none" in p for p in problems("--probe=none,icmp"))
    assert any("ping-count=0" in p for p in problems("--probe=icmp", "--ping-count=0"))
    for bad in ("tcp:0", "tcp:65536", "tcp:", "udp:53", ""):
        assert problems(f"--probe={bad}"), bad


def test_enums_families_and_names() -> None:
    assert ok("--probe-families=ipv6").settings.families == ("ipv6",)
    for arg in ("--probe-families=ipv5", "--probe-families=", "--icmp-mode=fast",
                "--log-format=xml", "--event-namespace=Bad_NS", "--namespace=a.b",
                "--leader-elect-id=UPPER", "--metrics-bind-address=8090",
                "--health-probe-bind-address=:99999"):  # fmt: skip
        assert problems(arg), arg


def test_selector_and_protected_labels_are_parsed_at_start_up() -> None:
    o = ok("--node-selector=pool in (spot, preempt),!gpu", "--protected-labels= a/b , team=db,")
    assert o.scope.selector is not None
    assert o.node_selector == "!gpu,pool in (preempt,spot)"
    assert [str(p) for p in o.scope.protected] == ["a/b", "team=db"]
    assert any("--node-selector" in p for p in problems("--node-selector=a in (b"))
    assert any("--protected-labels" in p for p in problems("--protected-labels=bad key"))


def test_go_flag_syntax_and_klog_flags() -> None:
    o = ok("-dry-run", "--v", "3", "--logtostderr", "--vmodule=x=2")
    assert o.dry_run
    assert o.verbosity == 3
    assert set(o.ignored_klog) == {"logtostderr", "vmodule"}
    # [fix] a stray positional is an error instead of silently ending the parse.
    assert any("false" in p for p in problems("--dry-run", "false", "--v=2"))


def test_echoes_that_do_not_fit_the_timeout_are_a_warning_only() -> None:
    o = ok("--ping-count=6", "--ping-interval=1s", "--ping-timeout=5s", "--node-name=me")
    assert len(o.warnings) == 1
    assert "--ping-timeout" in o.warnings[0]
    assert ok("--node-name=me").warnings == ()


def test_without_its_node_name_the_self_check_warns_that_it_may_probe_itself() -> None:
    """The Go original's manifests set no NODE_NAME: its own Node, which always answers, may
    then be a self-check peer."""
    (warning,) = ok().warnings
    assert warning.startswith("--node-name (NODE_NAME) is not set: the self-check may probe")
    assert ok(env={"NODE_NAME": "me"}).warnings == ()
    assert ok("--self-check=false").warnings == ()
    assert ok("--ping-count=0").warnings == ()  # unprobed mode: no self-check


def test_startup_line_names_the_effective_configuration() -> None:
    fields = startup_fields(ok("--ping-count=0", "--node-selector=a=b"))
    assert fields["probe"].startswith("none")
    assert fields["node_selector"] == "a=b"
    assert fields["lease"] == "kube-system/node-lifecycle-controller"


def test_secure_metrics_cannot_share_the_health_probes_port() -> None:
    (line,) = problems("--metrics-bind-address=:9000", "--health-probe-bind-address=:9000")
    assert "--metrics-bind-address" in line
    assert "must differ from --health-probe-bind-address" in line
    shared = ok("--metrics-secure=false", "--metrics-bind-address=:9000",
                "--health-probe-bind-address=:9000")  # fmt: skip
    assert not shared.metrics_secure
    assert ok("--metrics-bind-address=0", "--health-probe-bind-address=0").metrics_secure
    assert ok("--metrics-cert-dir=/certs").metrics_cert_dir == "/certs"
