"""The agent's command line: flag defaults and every validation rule, with all problems
reported at once."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from ipaddress import ip_address, ip_network

import pytest

from local_ccm.agent.core.config import DEFAULT_INTERFACE_EXCLUDE, AgentConfig, TypeSettings
from local_ccm.agent.options import FLAGS, AgentOptions, startup_fields
from local_ccm.kube.config import ClusterConfig, ConfigError
from local_ccm.validate import BindAddress
from tests.support.options import load_agent as load_options

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "192.0.2.1", "KUBERNETES_SERVICE_PORT": "6443"}
CLUSTER = ClusterConfig(server="https://192.0.2.1:6443", source="fake")
KUBECONFIG_CLUSTER = ClusterConfig(server="https://192.0.2.2:6443", source="fake kubeconfig")
NO_CONFIG = "not in a cluster, no --kubeconfig, none of /home/u/.kube/config exists"
ORIGINAL_ARGS = (
    "--node-name=n1",
    "--external-ip-target=8.8.8.8",
    "--remove-taint=true",
    "--reconcile-interval=10s",
    "--v=2",
)


def fake_resolve(kubeconfig: str, apiserver: str, env: Mapping[str, str]) -> ClusterConfig:
    """resolve_config's decisions without touching a file."""
    if kubeconfig == "/bad":
        raise ConfigError("cannot read kubeconfig /bad: No such file or directory")
    if kubeconfig:
        return KUBECONFIG_CLUSTER
    if env.get("KUBERNETES_SERVICE_HOST"):
        return CLUSTER
    raise ConfigError(f"no Kubernetes configuration: {NO_CONFIG}")


def load(*argv: str, env: Mapping[str, str] = IN_CLUSTER) -> AgentOptions:
    result = load_options(argv, env, resolve=fake_resolve)
    assert isinstance(result, AgentOptions), [str(p) for p in result]
    return result


def problems(*argv: str, env: Mapping[str, str] = IN_CLUSTER) -> list[str]:
    result = load_options(argv, env, resolve=fake_resolve)
    assert isinstance(result, list), f"expected problems, loaded {result}"
    return [str(p) for p in result]


# ------------------------------------------------------------------ defaults


@pytest.mark.parametrize(
    ("flag", "default"),
    [
        ("node-name", ""),
        ("kubeconfig", ""),
        ("internal-ip-target", ""),
        ("external-ip-target", "8.8.8.8"),
        ("remove-taint", True),
        ("reconcile-interval", 10),
        ("run-once", False),
        ("enable-azure-provider-id", False),
        ("v", 0),
        ("internal-ip-cidrs", ""),
        ("external-ip-cidrs", ""),
        ("external-ip-subnet", ""),
        ("internal-ip-interfaces", ""),
        ("external-ip-interfaces", ""),
        ("interface-exclude", ",".join(DEFAULT_INTERFACE_EXCLUDE)),
        ("include-vips", False),
        ("ip-family-order", ""),
        ("provided-node-ip-policy", "prefer"),
        ("dedupe-external-ip", True),
        ("require-internal-ip", False),
        ("provider-id", ""),
        ("report-condition", True),
        ("resync-interval", 1800),
        ("settle-time", 5),
        ("api-timeout", 15),
        ("event-namespace", "default"),
        ("metrics-bind-address", "127.0.0.1:8092"),
        ("health-probe-bind-address", "127.0.0.1:8093"),
        ("log-format", "text"),
        ("detect-only", False),
        ("output", "text"),
        ("metadata", True),
        ("metadata-rules", ""),
        ("metadata-beta-labels", False),
        ("metadata-label-domains", "local-ccm.io"),
        ("l2-announce", False),
        ("l2-lease-namespace", "kube-system"),
        ("l2-lb-class", "lb.local-ccm.io/pools"),
        ("l2-lb-classless", True),
        ("l2-lease-duration", 6),
        ("l2-renew-deadline", 4),
        ("l2-renew-period", 2),
    ],
)
def test_flag_declares_documented_default(flag: str, default: object) -> None:
    declared = FLAGS.lookup(flag)
    assert declared is not None
    assert declared.default == default


def test_every_declared_flag_has_a_default_row() -> None:
    assert len(FLAGS.flags) == 42


def test_node_name_defaults_to_node_name_env() -> None:
    assert load(env={**IN_CLUSTER, "NODE_NAME": "n2"}).node_name == "n2"


def test_node_name_flag_wins_over_env() -> None:
    assert load("--node-name=n1", env={**IN_CLUSTER, "NODE_NAME": "n2"}).node_name == "n1"


def test_defaults_load_to_default_options() -> None:
    options = load("--node-name=n1")
    assert options == AgentOptions(config=AgentConfig(), node_name="n1", cluster=CLUSTER)
    assert options.config.external == TypeSettings(targets=(ip_address("8.8.8.8"),))
    assert options.config.interface_exclude == DEFAULT_INTERFACE_EXCLUDE
    assert (options.reconcile_interval, options.resync_interval) == (10.0, 1800.0)
    assert (options.settle_time, options.api_timeout) == (5.0, 15.0)
    assert options.metrics_bind == BindAddress(ip_address("127.0.0.1"), 8092)
    assert options.health_bind == BindAddress(ip_address("127.0.0.1"), 8093)
    assert options.mode == "loop"
    assert options.remove_taint
    assert options.report_condition


def test_original_daemonset_args_load_to_documented_config() -> None:
    options = load(*ORIGINAL_ARGS)
    assert options.config == AgentConfig()  # ExternalIP ipv4 via 8.8.8.8 only [compat]
    assert options.node_name == "n1"
    assert options.reconcile_interval == 10.0
    assert options.verbosity == 2
    assert options.remove_taint is True
    assert options.ignored_klog == ()


# ------------------------------------------------------------------ values


def test_target_lists_take_one_per_family() -> None:
    options = load("--node-name=n1", "--internal-ip-target= 192.0.2.1 , 2001:db8::1 ,")
    assert options.config.internal.targets == (ip_address("192.0.2.1"), ip_address("2001:db8::1"))


def test_empty_external_target_disables_external_route_detection() -> None:
    options = load("--node-name=n1", "--external-ip-target=")
    assert options.config.external.targets == ()
    assert not options.config.enabled("ExternalIP", 4)


def test_cidr_lists_split_into_include_and_exclude() -> None:
    options = load("--node-name=n1", "--internal-ip-cidrs=10.0.0.0/8,!10.96.0.0/12,fd00::/8")
    assert options.config.internal.include == (ip_network("10.0.0.0/8"), ip_network("fd00::/8"))
    assert options.config.internal.exclude == (ip_network("10.96.0.0/12"),)


def test_external_ip_subnet_is_appended_to_external_cidrs() -> None:
    options = load(
        "--node-name=n1",
        "--external-ip-cidrs=203.0.113.0/24",
        "--external-ip-subnet=198.51.100.0/24",
    )
    expected = (ip_network("203.0.113.0/24"), ip_network("198.51.100.0/24"))
    assert options.config.external.include == expected


def test_exclusion_only_cidrs_are_valid_with_a_target_of_that_family() -> None:
    options = load(
        "--node-name=n1", "--internal-ip-target=192.0.2.1", "--internal-ip-cidrs=!10.96.0.0/12"
    )
    assert options.config.internal.exclude == (ip_network("10.96.0.0/12"),)


def test_interface_exclude_replaces_the_default_list() -> None:
    options = load("--node-name=n1", "--interface-exclude=lo, cni*")
    assert options.config.interface_exclude == ("lo", "cni*")


def test_empty_interface_exclude_excludes_nothing() -> None:
    assert load("--node-name=n1", "--interface-exclude=").config.interface_exclude == ()


@pytest.mark.parametrize(
    ("value", "order"), [("ipv4,ipv6", (4, 6)), ("ipv6,ipv4", (6, 4)), ("ipv6", (6,)), ("", ())]
)
def test_ip_family_order_values(value: str, order: tuple[int, ...]) -> None:
    assert load("--node-name=n1", f"--ip-family-order={value}").config.family_order == order


def test_policy_and_booleans_reach_the_agent_config() -> None:
    options = load(
        "--node-name=n1", "--provided-node-ip-policy=strict", "--dedupe-external-ip=false",
        "--require-internal-ip", "--include-vips", "--remove-taint=false",
        "--report-condition=false",
    )  # fmt: skip
    config = options.config
    assert config.provided_node_ip_policy == "strict"
    assert not config.dedupe_external_ip
    assert config.require_internal_ip
    assert config.include_vips
    assert not options.remove_taint
    assert not options.report_condition


def test_verbosity_above_five_behaves_as_five() -> None:
    assert load("--node-name=n1", "--v=9").verbosity == 5


def test_bind_address_zero_disables_the_server() -> None:
    options = load(
        "--node-name=n1", "--metrics-bind-address=0", "--health-probe-bind-address=:8093"
    )
    assert options.metrics_bind is None
    assert options.health_bind == BindAddress(None, 8093)


def test_provider_id_template_with_known_placeholders_loads() -> None:
    template = "local://{node_name}/{system_uuid}/{machine_id}"
    assert load("--node-name=n1", f"--provider-id={template}").provider_id == template


def test_klog_flags_are_accepted_and_recorded() -> None:
    options = load(*ORIGINAL_ARGS, "--logtostderr", "--vmodule=x=2")
    assert options.ignored_klog == ("logtostderr", "vmodule")


def test_run_once_mode() -> None:
    assert load("--node-name=n1", "--run-once").mode == "run-once"


@pytest.mark.parametrize("argv", [("detect",), ("--detect-only",)])
def test_detect_mode_needs_no_node_and_no_credentials(argv: tuple[str, ...]) -> None:
    options = load(*argv, env={})
    assert options.detect
    assert options.mode == "detect"
    assert options.node_name is None
    assert options.cluster is None


def test_detect_mode_with_node_but_no_credentials_loads_without_cluster() -> None:
    options = load("detect", "--node-name=n1", "--output=json", env={})
    assert options.cluster is None
    assert options.credentials_error == NO_CONFIG
    assert options.output == "json"


def test_detect_mode_with_node_and_credentials_resolves_them() -> None:
    assert load("detect", env={**IN_CLUSTER, "NODE_NAME": "n1"}).cluster == CLUSTER


def test_explicit_kubeconfig_is_resolved() -> None:
    options = load("--node-name=n1", "--kubeconfig=/etc/kube.conf", env={})
    assert (options.kubeconfig, options.cluster) == ("/etc/kube.conf", KUBECONFIG_CLUSTER)


def test_startup_fields_name_targets_cidrs_and_intervals() -> None:
    fields = startup_fields(load("--node-name=n1", "--internal-ip-cidrs=10.0.0.0/8,!10.96.0.0/12"))
    assert fields["external_targets"] == "8.8.8.8"
    assert fields["internal_targets"] == "-"
    assert fields["internal_cidrs"] == "10.0.0.0/8,!10.96.0.0/12"
    assert fields["reconcile_interval"] == "10s"
    assert fields["resync_interval"] == "30m0s"
    assert fields["metrics"] == "127.0.0.1:8092"


# ------------------------------------------------------------------ validation rules

RULES = [
    # 1. targets
    ("--internal-ip-target=node1.example.com",
     'invalid flag --internal-ip-target: "node1.example.com" is not an IP address '
     "(hostnames are not allowed)"),
    ("--external-ip-target=fe80::1%eth0",
     'invalid flag --external-ip-target: "fe80::1%eth0": zone-scoped addresses are not supported'),
    ("--external-ip-target=0.0.0.0",
     'invalid flag --external-ip-target: "0.0.0.0": the unspecified address cannot be a target'),
    ("--external-ip-target=::",
     'invalid flag --external-ip-target: "::": the unspecified address cannot be a target'),
    ("--external-ip-target=224.0.0.1",
     'invalid flag --external-ip-target: "224.0.0.1": a multicast address cannot be a target'),
    ("--internal-ip-target=192.0.2.1,192.0.2.2",
     "invalid flag --internal-ip-target: at most one ipv4 target, got 192.0.2.1 and 192.0.2.2"),
    # 2. CIDRs
    ("--internal-ip-cidrs=10.0.0.5/8",
     'invalid flag --internal-ip-cidrs: invalid CIDR "10.0.0.5/8": host bits set; '
     "did you mean 10.0.0.0/8?"),
    ("--external-ip-cidrs=!10.0.0.5/8",
     'invalid flag --external-ip-cidrs: invalid CIDR "!10.0.0.5/8": host bits set; '
     "did you mean !10.0.0.0/8?"),
    ("--external-ip-subnet=10.0.0.0/33",
     'invalid flag --external-ip-subnet: invalid CIDR "10.0.0.0/33": prefix length must be 0-32'),
    ("--external-ip-subnet=!10.0.0.0/8",
     'invalid flag --external-ip-subnet: "!10.0.0.0/8": exclusions go in --external-ip-cidrs'),
    ("--internal-ip-cidrs=!10.96.0.0/12",
     "invalid flag --internal-ip-cidrs: only exclusions for ipv4 and no ipv4 --internal-ip-target:"
     " nothing selects an ipv4 InternalIP (add a positive ipv4 CIDR or a target)"),
    ("--external-ip-target= --external-ip-cidrs=!10.0.0.0/8",
     "invalid flag --external-ip-cidrs: only exclusions for ipv4 and no ipv4 --external-ip-target:"
     " nothing selects an ipv4 ExternalIP (add a positive ipv4 CIDR or a target)"),
    ("--external-ip-cidrs=!fd00::/8",
     "invalid flag --external-ip-cidrs: only exclusions for ipv6 and no ipv6 --external-ip-target:"
     " nothing selects an ipv6 ExternalIP (add a positive ipv6 CIDR or a target)"),
    # 3. globs
    ("--internal-ip-interfaces=eth[0",
     "invalid flag --internal-ip-interfaces: \"eth[0\": unclosed '[' "
     "(a character class is written [...])"),
    ("--external-ip-interfaces=a/b",
     "invalid flag --external-ip-interfaces: \"a/b\": interface names contain no '/' or "
     "whitespace"),
    ("--interface-exclude='eth 0'",
     "invalid flag --interface-exclude: \"eth 0\": interface names contain no '/' or whitespace"),
    ("--interface-exclude=averyveryverylongname",
     'invalid flag --interface-exclude: "averyveryverylongname": can never match: '
     "interface names have at most 15 characters"),
    # 4. durations
    ("--reconcile-interval=0", "invalid flag --reconcile-interval: must be at least 1s, got 0s"),
    ("--reconcile-interval=500ms",
     "invalid flag --reconcile-interval: must be at least 1s, got 500ms"),
    ("--reconcile-interval=10",
     'invalid flag --reconcile-interval: missing unit in duration "10"; did you mean 10s?'),
    ("--resync-interval=30s", "invalid flag --resync-interval: must be at least 1m0s, got 30s"),
    ("--reconcile-interval=2m --resync-interval=1m",
     "invalid flag --resync-interval: must be at least --reconcile-interval (2m0s), got 1m0s"),
    ("--settle-time=6m", "invalid flag --settle-time: must be between 0s and 5m0s, got 6m0s"),
    ("--settle-time=-1s", "invalid flag --settle-time: must be between 0s and 5m0s, got -1s"),
    ("--api-timeout=500ms", "invalid flag --api-timeout: must be at least 1s, got 500ms"),
    # 5. enums
    ("--ip-family-order=ipv5",
     'invalid flag --ip-family-order: "ipv5" is not a family; use ipv4,ipv6 or ipv6,ipv4'),
    ("--ip-family-order=ipv4,ipv4",
     "invalid flag --ip-family-order: a family is repeated; use ipv4,ipv6 or ipv6,ipv4"),
    ("--provided-node-ip-policy=always",
     'invalid flag --provided-node-ip-policy: "always" is not one of prefer, strict, ignore'),
    ("--log-format=xml", 'invalid flag --log-format: "xml" is not one of text, json'),
    ("detect --output=yaml", 'invalid flag --output: "yaml" is not one of text, json'),
    ("--output=json", "invalid flag --output: only used in detect mode (local-ccm detect)"),
    # 6. provider ID
    ("--provider-id=local-{node_name}",
     'invalid flag --provider-id: "local-{node_name}" must contain :// '
     '(e.g. "local://{system_uuid}")'),
    ("--provider-id=local://{hostname}",
     "invalid flag --provider-id: unknown placeholder {hostname}; "
     "use {node_name}, {system_uuid}, {machine_id}"),
    ("--provider-id=local://{node_name",
     'invalid flag --provider-id: "local://{node_name" has an unbalanced brace'),
    ("--provider-id=local://x --enable-azure-provider-id",
     "invalid flag --provider-id: cannot be combined with --enable-azure-provider-id"),
    # 7. bind addresses
    ("--metrics-bind-address=8092",
     'invalid flag --metrics-bind-address: "8092" is not [host]:port (e.g. "127.0.0.1:8080", '
     '":8080", "[::1]:8080", or "0" to disable)'),
    ("--health-probe-bind-address=::1:8093",
     'invalid flag --health-probe-bind-address: "::1:8093": put an IPv6 host in brackets, '
     "e.g. [::1]:port"),
    ("--metrics-bind-address=127.0.0.1:70000",
     'invalid flag --metrics-bind-address: "127.0.0.1:70000": port must be a number 0-65535'),
    # 8. node name
    ("--node-name=Node_1",
     "invalid flag --node-name: \"Node_1\" is not a DNS-1123 subdomain: use lower-case letters, "
     "digits, '-' and '.', starting and ending with a letter or digit (e.g. \"example.com\")"),
    ("--node-name=$(NODE_NAME)",
     'invalid flag --node-name: "$(NODE_NAME)" contains the unexpanded variable reference '
     "$(NODE_NAME): the container has no environment variable NODE_NAME; add env NODE_NAME "
     "with valueFrom.fieldRef.fieldPath: spec.nodeName to the Pod spec"),
    # 9. credentials
    ("--kubeconfig=/bad",
     "invalid flag --kubeconfig: cannot read kubeconfig /bad: No such file or directory"),
    ("detect --kubeconfig=/bad",
     "invalid flag --kubeconfig: cannot read kubeconfig /bad: No such file or directory"),
    # other scalars and modes
    ("--event-namespace=Kube_System",
     "invalid flag --event-namespace: \"Kube_System\" is not a DNS-1123 label: use lower-case "
     "letters, digits and '-', starting and ending with a letter or digit (e.g. \"my-name\")"),
    ("--v=-1", "invalid flag --v: must be 0 or more, got -1"),
    ("detect --run-once", "invalid flag --run-once: detect mode writes nothing; drop --run-once"),
    # Go flag syntax, through the shared parser
    ("--remove-taint false", 'unexpected argument "false" (use --remove-taint=false)'),
    ("--bogus", "unknown flag --bogus"),
    ("--node-name=n1 extra", 'unexpected argument "extra"'),
    ("--v=2 detect",
     'unexpected argument "detect" (the sub-command detect must be the first argument)'),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), RULES, ids=[r[0] for r in RULES])
def test_validation_rule_reports_problem(args: str, expected: str) -> None:
    argv = shlex.split(args)
    if argv[0] != "detect" and not any(a.startswith("--node-name") for a in argv):
        argv.insert(0, "--node-name=n1")
    assert problems(*argv) == [expected]


def test_missing_node_name_outside_detect_mode() -> None:
    assert problems() == ["missing --node-name (or NODE_NAME)"]


def test_unexpanded_node_name_from_env_names_the_variable() -> None:
    lines = problems(env={**IN_CLUSTER, "NODE_NAME": "$(NODE_NAME)"})
    assert lines == [
        'invalid environment variable NODE_NAME: "$(NODE_NAME)" contains the unexpanded variable '
        "reference $(NODE_NAME): the container has no environment variable NODE_NAME; add env "
        "NODE_NAME with valueFrom.fieldRef.fieldPath: spec.nodeName to the Pod spec"
    ]


def test_no_credentials_outside_a_cluster() -> None:
    assert problems("--node-name=n1", env={}) == [f"no Kubernetes credentials: {NO_CONFIG}"]


def test_every_problem_is_listed_at_once() -> None:
    lines = problems(
        "--remove-taint", "false", "--reconcile-interval=0", "--internal-ip-target=bogus",
        "--metrics-bind-address=8092", "--log-format=xml", "--v=-1", env={},
    )  # fmt: skip
    assert lines == [
        'unexpected argument "false" (use --remove-taint=false)',
        'invalid flag --internal-ip-target: "bogus" is not an IP address '
        "(hostnames are not allowed)",
        "missing --node-name (or NODE_NAME)",
        f"no Kubernetes credentials: {NO_CONFIG}",
        "invalid flag --reconcile-interval: must be at least 1s, got 0s",
        'invalid flag --metrics-bind-address: "8092" is not [host]:port (e.g. "127.0.0.1:8080", '
        '":8080", "[::1]:8080", or "0" to disable)',
        'invalid flag --log-format: "xml" is not one of text, json',
        "invalid flag --v: must be 0 or more, got -1",
    ]


def test_bad_target_does_not_add_an_exclusion_only_problem() -> None:
    lines = problems(
        "--node-name=n1", "--internal-ip-target=bogus", "--internal-ip-cidrs=!10.96.0.0/12"
    )
    assert len(lines) == 1
    assert "--internal-ip-target" in lines[0]
