"""Go-compatible flag parsing."""

from __future__ import annotations

import pytest

from local_ccm.flags import (
    Flag,
    FlagSet,
    Parsed,
    Problem,
    format_usage,
    format_version,
    invalid,
    invalid_env,
    missing,
    parse,
    unexpected_argument,
    usage_error,
)
from local_ccm.flags import (
    invalid as problem,
)
from local_ccm.flags.scan import _typed
from local_ccm.gosyntax import (
    GoSyntaxError,
    format_go_duration,
    format_go_duration_ns,
    go_quote,
    parse_go_bool,
    parse_go_duration,
    parse_go_duration_ns,
    parse_go_float,
    parse_go_int,
)

AGENT = FlagSet(
    "local-ccm",
    [
        Flag("node-name", "string", "", "Node to manage.", env=("NODE_NAME",)),
        Flag("external-ip-target", "string", "8.8.8.8", "Targets.", metavar="IPs"),
        Flag("remove-taint", "bool", True, "Remove the uninitialized taint."),
        Flag("run-once", "bool", False, "One pass, then exit."),
        Flag("reconcile-interval", "duration", 10, "Local re-detection period."),
        Flag("v", "int", 0, "Verbosity."),
    ],
    subcommands=frozenset({"detect"}),
    version="1.2.3",
)

LIFECYCLE = FlagSet(
    "node-lifecycle-controller",
    [
        Flag("dry-run", "bool", False, "Never write Nodes."),
        Flag("v", "int", 0, "Verbosity."),
        Flag("ping-count", "int", 3, "ICMP echoes."),
    ],
)

IPAM = FlagSet(
    "node-ipam-controller",
    [
        Flag("leader-elect-lease-duration", "duration", 15, "Lease.", env=("IPAM_LEASE_DURATION",)),
        Flag(
            "leader-elect-retry-period",
            "duration",
            2,
            "Retry period.",
            env=("IPAM_LEADER_ELECT_RETRY_PERIOD", "IPAM_RESOURCE_LOCK"),
        ),
        Flag(
            "enable-leader-election", "bool", True, "Elect.", env=("IPAM_ENABLE_LEADER_ELECTION",)
        ),
        Flag(
            "log-format",
            "string",
            "text",
            "Log format.",
            aliases=("logging-format",),
            env=("IPAM_LOG_FORMAT",),
        ),
        Flag("kube-api-qps", "float", 50, "QPS.", env=("IPAM_KUBE_API_QPS",)),
        Flag("node-cidr-mask-size", "int", None, "Mask.", env=("IPAM_NODE_CIDR_MASK_SIZE",)),
    ],
)


def run(flagset: FlagSet, *argv: str, env: dict[str, str] | None = None) -> Parsed:
    return parse(flagset, argv, env or {})


def messages(parsed: Parsed) -> list[str]:
    return [str(p) for p in parsed.problems]


# ---------------------------------------------------------------- Go scalar syntax


@pytest.mark.parametrize(
    ("text", "expected"),
    [(s, True) for s in ("1", "t", "T", "true", "TRUE", "True")]
    + [(s, False) for s in ("0", "f", "F", "false", "FALSE", "False")],
)
def test_bool_accepts_the_twelve_go_spellings(text: str, expected: bool) -> None:
    assert parse_go_bool(text) is expected


@pytest.mark.parametrize("text", ["", "yes", "no", "tRuE", "2", " true", "on"])
def test_bool_rejects_other_spellings(text: str) -> None:
    with pytest.raises(GoSyntaxError, match="invalid boolean"):
        parse_go_bool(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("-0", 0),
        ("42", 42),
        ("+5", 5),
        ("-17", -17),
        ("0x1F", 31),
        ("0X1f", 31),
        ("0o17", 15),
        ("0O17", 15),
        ("017", 15),  # a leading 0 means octal
        ("00", 0),
        ("0b101", 5),
        ("-0b101", -5),
        ("1_000", 1000),  # Go integer-literal underscores (base argument 0)
        ("0x_1F", 31),
        ("0_17", 15),
        ("9223372036854775807", 9223372036854775807),
        ("-9223372036854775808", -9223372036854775808),
    ],
)
def test_int_follows_go_parseint_base_0(text: str, expected: int) -> None:
    assert parse_go_int(text) == expected


@pytest.mark.parametrize(
    "text", ["", "+", "-", "08", "0x", "0b", "0o", "_1", "1_", "1__0", "+-5", " 1", "1.0", "1e3"]
)
def test_int_rejects_invalid_syntax(text: str) -> None:
    with pytest.raises(GoSyntaxError, match="invalid integer"):
        parse_go_int(text)


@pytest.mark.parametrize(
    "text", ["9223372036854775808", "-9223372036854775809", "0x8000000000000000"]
)
def test_int_rejects_values_beyond_int64(text: str) -> None:
    with pytest.raises(GoSyntaxError, match="out of range"):
        parse_go_int(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50", 50.0),
        ("0.5", 0.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("-1e3", -1000.0),
        ("1_000.5", 1000.5),
        ("0x1p-2", 0.25),
        ("1e-400", 0.0),
        ("+Infinity", float("inf")),
    ],
)
def test_float_follows_go_parsefloat(text: str, expected: float) -> None:
    assert parse_go_float(text) == expected


@pytest.mark.parametrize("text", ["", ".", "1e", " 1", "0x1.8", "-nan", "1,5", "1__0"])
def test_float_rejects_invalid_syntax(text: str) -> None:
    with pytest.raises(GoSyntaxError, match="invalid number"):
        parse_go_float(text)


def test_float_rejects_overflow() -> None:
    with pytest.raises(GoSyntaxError, match="out of range"):
        parse_go_float("1e400")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("1ns", 1e-9),
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),  # micro sign
        ("1\u03bcs", 1e-6),  # Greek mu
        (".5s", 0.5),
        ("5.s", 5.0),
        ("1h2m3.5s", 3723.5),
        ("-1.5h", -5400.0),
        ("+2m", 120.0),
        ("0", 0.0),
        ("+0", 0.0),
        ("-0", 0.0),
        ("0s", 0.0),
    ],
)
def test_duration_parses_go_syntax(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("1.5\u00b5s", 1500),
        ("1.000000001s", 1_000_000_001),
        ("1.0000000005s", 1_000_000_000),  # Go truncates below a nanosecond
        ("0.3333333333333333333h", 1_200_000_000_000),  # Go's float64 fraction arithmetic
        ("2562047h47m16.854775807s", 2**63 - 1),
        ("-2562047h47m16.854775808s", -(2**63)),
        ("9223372036854775807ns", 2**63 - 1),
    ],
)
def test_duration_is_exact_to_the_nanosecond_like_go(text: str, nanoseconds: int) -> None:
    assert parse_go_duration_ns(text) == nanoseconds


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", 'invalid duration ""'),
        (".", 'invalid duration "."'),
        (".s", 'invalid duration ".s"'),
        ("-", 'invalid duration "-"'),
        ("s", 'invalid duration "s"'),
        ("--1s", 'invalid duration "--1s"'),
        ("1x", 'unknown unit "x"'),
        ("1h-1s", 'unknown unit "h-"'),
        ("1S", 'unknown unit "S"'),
        ("1s ", 'unknown unit "s "'),
        ("2562047h47m16.854775808s", "out of range"),
        ("9223372036854775808ns", "out of range"),
        ("99999999999999999999999s", "out of range"),
    ],
)
def test_duration_rejects_invalid_syntax(text: str, reason: str) -> None:
    with pytest.raises(GoSyntaxError, match=reason):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("text", "hint"), [("10", "did you mean 10s?"), ("1.5", "did you mean 1.5s?")]
)
def test_duration_without_unit_hints_at_seconds(text: str, hint: str) -> None:
    with pytest.raises(GoSyntaxError, match="missing unit") as info:
        parse_go_duration(text)
    assert str(info.value).endswith(hint)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (1.5, "1.5s"),
        (0.3, "300ms"),
        (0.0015, "1.5ms"),
        (1e-6, "1\u00b5s"),
        (1e-9, "1ns"),
        (10, "10s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (5400, "1h30m0s"),
        (-90, "-1m30s"),
        (1800, "30m0s"),
    ],
)
def test_format_duration_like_go_duration_string(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text


def test_format_duration_ns_handles_int64_extremes() -> None:
    assert format_go_duration_ns(-(2**63)) == "-2562047h47m16.854775808s"
    assert format_go_duration_ns(3_600_000_000_001) == "1h0m0.000000001s"


# ---------------------------------------------------------------- syntax rules


def test_original_daemonset_args_parse_cleanly() -> None:
    parsed = run(
        AGENT,
        "--node-name=node-1",
        "--external-ip-target=8.8.8.8",
        "--remove-taint=true",
        "--reconcile-interval=10s",
        "--v=2",
    )
    assert parsed.problems == ()
    assert parsed.values == {
        "node-name": "node-1",
        "external-ip-target": "8.8.8.8",
        "remove-taint": True,
        "run-once": False,
        "reconcile-interval": 10.0,
        "v": 2,
    }


def test_lifecycle_dry_run_false_is_reported_and_later_flags_still_apply() -> None:
    parsed = run(LIFECYCLE, "--dry-run", "false", "--v=2")
    assert messages(parsed) == ['unexpected argument "false" (use --dry-run=false)']
    assert parsed.values["dry-run"] is True
    assert parsed.values["v"] == 2  # the original dropped everything after "false"


def test_single_and_double_dash_are_equivalent() -> None:
    assert (
        run(AGENT, "-node-name=a", "-v", "3").values
        == run(AGENT, "--node-name=a", "--v", "3").values
    )


@pytest.mark.parametrize("argv", [("--v=2",), ("--v", "2"), ("-v=2",), ("-v", "2")])
def test_v_flag_accepts_every_go_form(argv: tuple[str, ...]) -> None:
    parsed = run(AGENT, *argv)
    assert (parsed.values["v"], parsed.problems) == (2, ())


def test_value_flag_takes_the_next_argument_even_if_it_starts_with_a_dash() -> None:
    assert run(AGENT, "--node-name", "--v=2").values["node-name"] == "--v=2"


def test_value_flag_at_the_end_needs_an_argument() -> None:
    parsed = run(AGENT, "--v=1", "--node-name")
    assert messages(parsed) == ["invalid flag --node-name: needs an argument"]


def test_equals_with_empty_value_sets_an_empty_string() -> None:
    parsed = run(AGENT, "--external-ip-target=")
    assert (parsed.values["external-ip-target"], parsed.sources["external-ip-target"]) == (
        "",
        "flag",
    )


def test_bare_bool_means_true() -> None:
    assert run(AGENT, "--run-once").values["run-once"] is True


@pytest.mark.parametrize(("spelling", "value"), [("0", False), ("F", False), ("True", True)])
def test_bool_with_equals_accepts_go_spellings(spelling: str, value: bool) -> None:
    assert run(AGENT, f"--remove-taint={spelling}").values["remove-taint"] is value


def test_bool_with_bad_value_is_reported() -> None:
    parsed = run(AGENT, "--remove-taint=yes")
    assert messages(parsed) == [
        'invalid flag --remove-taint: invalid boolean "yes" (use true or false)'
    ]
    assert parsed.values["remove-taint"] is True


def test_bool_followed_by_a_separate_value_stays_true_and_reports_it() -> None:
    parsed = run(AGENT, "--remove-taint", "false")
    assert parsed.values["remove-taint"] is True
    assert messages(parsed) == ['unexpected argument "false" (use --remove-taint=false)']


def test_last_occurrence_wins() -> None:
    parsed = run(AGENT, "--v=1", "-v", "4", "--v=3", "--run-once", "--run-once=false")
    assert (parsed.values["v"], parsed.values["run-once"]) == (3, False)


def test_invalid_later_occurrence_is_reported_and_keeps_the_earlier_value() -> None:
    parsed = run(AGENT, "--v=2", "--v=two")
    assert parsed.values["v"] == 2
    assert messages(parsed) == ['invalid flag --v: invalid integer "two"']


def test_double_dash_ends_flag_parsing() -> None:
    parsed = run(AGENT, "--v=1", "--", "--v=2", "x")
    assert parsed.values["v"] == 1
    assert messages(parsed) == ['unexpected argument "--v=2"', 'unexpected argument "x"']


@pytest.mark.parametrize("arg", ["-h", "--help", "-help", "--help=1"])
def test_help_flags_request_help(arg: str) -> None:
    parsed = run(AGENT, arg)
    assert (parsed.help_requested, parsed.problems) == (True, ())


def test_version_flag_requests_version() -> None:
    assert run(AGENT, "--version").version_requested is True
    assert run(AGENT, "-version=false").version_requested is False


def test_version_flag_is_unknown_without_a_version() -> None:
    assert messages(run(LIFECYCLE, "--version")) == ["unknown flag --version"]


@pytest.mark.parametrize("arg", ["---x", "-=x", "--=x", "---", "-=", "----v=1"])
def test_bad_flag_syntax_is_reported(arg: str) -> None:
    assert messages(run(AGENT, arg)) == [f"bad flag syntax: {arg}"]


def test_unknown_flag_is_reported_with_a_suggestion() -> None:
    parsed = run(AGENT, "--node_name=a", "--remove-tain", "--zzz=1")
    assert messages(parsed) == [
        "unknown flag --node_name (did you mean --node-name?)",
        "unknown flag --remove-tain (did you mean --remove-taint?)",
        "unknown flag --zzz",
    ]


def test_unknown_flag_swallows_its_separate_value() -> None:
    parsed = run(AGENT, "--bogus", "value", "--v=2")
    assert messages(parsed) == ["unknown flag --bogus"]
    assert parsed.values["v"] == 2


@pytest.mark.parametrize("arg", ["stray", "-", ""])
def test_positional_argument_is_reported(arg: str) -> None:
    assert messages(run(AGENT, "--v=1", arg)) == [f'unexpected argument "{arg}"']


def test_subcommand_is_accepted_as_the_first_argument() -> None:
    parsed = run(AGENT, "detect", "--v=3")
    assert (parsed.subcommand, parsed.values["v"], parsed.problems) == ("detect", 3, ())


def test_subcommand_elsewhere_is_reported_with_a_hint() -> None:
    parsed = run(AGENT, "--v=3", "detect")
    assert parsed.subcommand is None
    assert messages(parsed) == [
        'unexpected argument "detect" (the sub-command detect must be the first argument)'
    ]


def test_undeclared_subcommand_is_a_positional_argument() -> None:
    parsed = run(LIFECYCLE, "detect")
    assert (parsed.subcommand, messages(parsed)) == (None, ['unexpected argument "detect"'])


def test_every_problem_is_collected_in_order() -> None:
    parsed = run(
        LIFECYCLE, "--ping-count=x", "--bogus=1", "stray", "---z", "--v=2", "--dry-run=maybe"
    )
    assert messages(parsed) == [
        'invalid flag --ping-count: invalid integer "x"',
        "unknown flag --bogus",
        'unexpected argument "stray"',
        "bad flag syntax: ---z",
        'invalid flag --dry-run: invalid boolean "maybe" (use true or false)',
    ]
    assert parsed.values["v"] == 2


def test_duration_without_unit_is_reported_with_the_hint() -> None:
    assert messages(run(AGENT, "--reconcile-interval=10")) == [
        'invalid flag --reconcile-interval: missing unit in duration "10"; did you mean 10s?'
    ]


# ---------------------------------------------------------------- klog flags


def test_klog_flags_are_accepted_ignored_and_collected_once() -> None:
    parsed = run(
        AGENT,
        "--logtostderr",
        "-alsologtostderr=false",
        "--log_dir",
        "/var/log",
        "--stderrthreshold=INFO",
        "--logtostderr=true",
        "--vmodule",
        "x=2",
        "--v=2",
    )
    assert parsed.problems == ()
    assert parsed.ignored_klog == (
        "logtostderr",
        "alsologtostderr",
        "log_dir",
        "stderrthreshold",
        "vmodule",
    )
    assert parsed.values["v"] == 2


def test_klog_bool_with_separate_value_is_reported_like_any_bool() -> None:
    assert messages(run(AGENT, "--logtostderr", "false")) == [
        'unexpected argument "false" (use --logtostderr=false)'
    ]


def test_klog_value_flag_at_the_end_needs_an_argument() -> None:
    assert messages(run(AGENT, "--log_file")) == ["invalid flag --log_file: needs an argument"]


def test_klog_bool_with_bad_value_is_reported() -> None:
    assert messages(run(AGENT, "--one_output=sure")) == [
        'invalid flag --one_output: invalid boolean "sure" (use true or false)'
    ]


def test_declared_flag_shadows_a_klog_name() -> None:
    flagset = FlagSet("x", [Flag("log_dir", "string", "", "Declared here.")])
    parsed = run(flagset, "--log_dir=/tmp")
    assert (parsed.values["log_dir"], parsed.ignored_klog) == ("/tmp", ())


# ---------------------------------------------------------------- environment


def test_env_fallback_applies_when_the_flag_is_absent() -> None:
    parsed = run(AGENT, env={"NODE_NAME": "node-7"})
    assert (parsed.values["node-name"], parsed.sources["node-name"]) == ("node-7", "env:NODE_NAME")


def test_flag_beats_env_beats_default() -> None:
    env = {"NODE_NAME": "from-env", "IPAM_LEASE_DURATION": "30s"}
    assert run(AGENT, "--node-name=from-flag", env=env).values["node-name"] == "from-flag"
    parsed = run(IPAM, env=env)
    assert parsed.values["leader-elect-lease-duration"] == 30.0
    assert parsed.values["leader-elect-retry-period"] == 2.0
    assert parsed.sources["leader-elect-retry-period"] == "default"


def test_env_vars_are_tried_in_priority_order() -> None:
    both = {"IPAM_LEADER_ELECT_RETRY_PERIOD": "3s", "IPAM_RESOURCE_LOCK": "5s"}
    legacy = {"IPAM_RESOURCE_LOCK": "5s"}
    assert run(IPAM, env=both).sources["leader-elect-retry-period"] == (
        "env:IPAM_LEADER_ELECT_RETRY_PERIOD"
    )
    assert run(IPAM, env=legacy).values["leader-elect-retry-period"] == 5.0


def test_empty_env_var_counts_as_unset() -> None:
    parsed = run(IPAM, env={"IPAM_LEADER_ELECT_RETRY_PERIOD": "", "IPAM_RESOURCE_LOCK": "4s"})
    assert parsed.values["leader-elect-retry-period"] == 4.0


def test_env_values_use_the_flag_type_rules() -> None:
    env = {"IPAM_ENABLE_LEADER_ELECTION": "F", "IPAM_KUBE_API_QPS": "7.5"}
    parsed = run(IPAM, env=env | {"IPAM_NODE_CIDR_MASK_SIZE": "0x18"})
    assert parsed.values["enable-leader-election"] is False
    assert (parsed.values["kube-api-qps"], parsed.values["node-cidr-mask-size"]) == (7.5, 24)


def test_bad_env_value_is_reported_naming_the_variable() -> None:
    parsed = run(IPAM, env={"IPAM_LEASE_DURATION": "15", "IPAM_ENABLE_LEADER_ELECTION": "yes"})
    assert messages(parsed) == [
        'invalid environment variable IPAM_LEASE_DURATION: missing unit in duration "15"; '
        "did you mean 15s?",
        'invalid environment variable IPAM_ENABLE_LEADER_ELECTION: invalid boolean "yes" '
        "(use true or false)",
    ]
    assert parsed.problems[0].flag == "leader-elect-lease-duration"
    assert parsed.values["leader-elect-lease-duration"] == 15.0


def test_invalid_flag_value_does_not_fall_back_to_env() -> None:
    parsed = run(IPAM, "--leader-elect-lease-duration=x", env={"IPAM_LEASE_DURATION": "30s"})
    assert parsed.sources["leader-elect-lease-duration"] == "default"
    assert len(parsed.problems) == 1


# ---------------------------------------------------------------- aliases, sources, values


def test_alias_sets_the_canonical_flag_and_shares_last_wins() -> None:
    parsed = run(IPAM, "--logging-format=json")
    assert (parsed.values["log-format"], parsed.sources["log-format"]) == ("json", "flag")
    assert run(IPAM, "--logging-format=json", "--log-format=text").values["log-format"] == "text"


def test_sources_and_explicit_say_where_values_came_from() -> None:
    parsed = run(AGENT, "--v=1", env={"NODE_NAME": "n"})
    assert parsed.sources == {
        "node-name": "env:NODE_NAME",
        "external-ip-target": "default",
        "remove-taint": "default",
        "run-once": "default",
        "reconcile-interval": "default",
        "v": "flag",
    }
    assert parsed.explicit == frozenset({"node-name", "v"})


def test_defaults_are_typed_and_unset_defaults_are_none() -> None:
    parsed = run(IPAM)
    assert parsed.values["leader-elect-lease-duration"] == 15.0
    assert isinstance(parsed.values["kube-api-qps"], float)
    assert parsed.values["node-cidr-mask-size"] is None


def test_typed_getters_return_values_and_reject_wrong_types() -> None:
    def get(parsed: Parsed, name: str, kind: type[object]) -> object:
        value = parsed.values[name]  # the getters' type check, for the kinds src reads untyped
        return None if value is None else _typed(value, kind, name)

    parsed = run(IPAM, "--node-cidr-mask-size=24")
    assert get(parsed, "leader-elect-lease-duration", float) == 15.0
    assert parsed.get_bool("enable-leader-election") is True
    assert parsed.get_str("log-format") == "text"
    assert get(parsed, "node-cidr-mask-size", int) == 24
    assert get(run(IPAM), "node-cidr-mask-size", int) is None
    with pytest.raises(TypeError):
        get(parsed, "log-format", int)
    with pytest.raises(TypeError):
        get(parsed, "enable-leader-election", int)


def test_flagset_rejects_duplicate_and_reserved_names() -> None:
    with pytest.raises(ValueError, match="declared twice or reserved"):
        FlagSet("x", [Flag("a", "bool", False, ""), Flag("b", "bool", False, "", aliases=("a",))])
    with pytest.raises(ValueError, match="reserved"):
        FlagSet("x", [Flag("help", "bool", False, "")])
    with pytest.raises(ValueError, match="reserved"):
        FlagSet("x", [Flag("version", "bool", False, "")], version="1")


def test_flag_rejects_bad_names_and_defaults_of_the_wrong_type() -> None:
    with pytest.raises(ValueError, match="bad flag name"):
        Flag("-dash", "string", "", "")
    with pytest.raises(TypeError):
        Flag("n", "int", "3", "")
    with pytest.raises(TypeError):
        Flag("n", "duration", "10s", "")
    with pytest.raises(TypeError):
        Flag("n", "int", True, "")


# ---------------------------------------------------------------- problems and output


@pytest.mark.parametrize(
    ("item", "text"),
    [
        (invalid("ping-count", "must be ≥ 0"), "invalid flag --ping-count: must be ≥ 0"),
        (problem("v", "must be ≥ 0"), "invalid flag --v: must be ≥ 0"),
        (
            invalid(None, "lease duration must exceed renew deadline"),
            "lease duration must exceed renew deadline",
        ),
        (missing("node-name", ("NODE_NAME",)), "missing --node-name (or NODE_NAME)"),
        (missing("node-name"), "missing --node-name"),
        (missing("x", ("A", "B")), "missing --x (or A or B)"),
        (unexpected_argument("x"), 'unexpected argument "x"'),
        (unexpected_argument('a"b', "hint"), 'unexpected argument "a\\"b" (hint)'),
        (invalid_env("IPAM_X", "bad"), "invalid environment variable IPAM_X: bad"),
        (Problem("f", "reason", env_var="V"), "invalid environment variable V: reason"),
    ],
)
def test_problem_renders_the_stderr_line(item: Problem, text: str) -> None:
    assert str(item) == text


def test_usage_error_lists_every_problem_then_the_help_line() -> None:
    problems = [invalid("v", "bad"), missing("node-name", ("NODE_NAME",))]
    assert usage_error("local-ccm", problems) == (
        "invalid flag --v: bad\nmissing --node-name (or NODE_NAME)\n"
        "run 'local-ccm --help' for usage"
    )


def test_format_usage_uses_go_layout_defaults_env_and_aliases() -> None:
    text = format_usage(AGENT) + format_usage(IPAM)
    assert text.startswith("Usage: local-ccm [detect] [flags]\n")
    assert (
        "  -reconcile-interval duration\n    \tLocal re-detection period. (default 10s)\n" in text
    )
    assert '  -external-ip-target IPs\n    \tTargets. (default "8.8.8.8")\n' in text
    assert "  -remove-taint\n    \tRemove the uninitialized taint. (default true)\n" in text
    assert "  -run-once\n    \tOne pass, then exit.\n" in text  # zero default omitted
    assert "  -node-name string\n    \tNode to manage. [env: NODE_NAME]\n" in text
    assert "  -kube-api-qps float\n    \tQPS. (default 50) [env: IPAM_KUBE_API_QPS]\n" in text
    assert "[alias: -logging-format] [env: IPAM_LOG_FORMAT]" in text
    assert "  -version\n" in text
    assert "-logtostderr" in text


def test_format_usage_lists_flags_sorted_by_name() -> None:
    lines = [line for line in format_usage(AGENT).splitlines() if line.startswith("  -")]
    names = [line.split()[0] for line in lines][:-2]  # help and version come last
    assert names == sorted(names)


def test_format_version_names_program_version_and_python() -> None:
    assert format_version(AGENT, "3.11.9") == "local-ccm 1.2.3 (python 3.11.9)"


def test_go_quote_escapes_like_strconv_quote() -> None:
    assert go_quote('a"b\\c\nd\x00é\u2028') == '"a\\"b\\\\c\\nd\\x00é\\u2028"'


def test_problem_lines_escape_control_characters_in_user_text() -> None:
    parsed = run(IPAM, "--bo\ngus", "---\n", "x\ny", env={"IPAM_LEASE_DURATION": "1\n"})
    assert messages(parsed) == [
        "unknown flag --bo\\ngus",
        "bad flag syntax: ---\\n",
        'unexpected argument "x\\ny"',
        'invalid environment variable IPAM_LEASE_DURATION: unknown unit "\\n" in duration '
        '"1\\n" (ns, us, ms, s, m, h)',
    ]
    assert str(invalid("v", "a\nb")) == "invalid flag --v: a\\nb"


def test_an_accumulating_flag_adds_its_repeats_up() -> None:
    """pflag's string slices: kube-controller-manager's `--controllers=a --controllers=b` is
    `a,b`; any other flag keeps Go's last-one-wins."""
    table = FlagSet("prog", [Flag("list", "string", "*", "x", accumulates=True),
                             Flag("one", "string", "", "x")])  # fmt: skip
    parsed = run(table, "--list=a", "-list", "b,c", "--one=x", "--one=y")
    assert (parsed.values["list"], parsed.values["one"]) == ("a,b,c", "y")
    assert run(table).values["list"] == "*"


def test_only_a_string_flag_accumulates() -> None:
    with pytest.raises(TypeError, match="only a string flag"):
        Flag("n", "int", 0, "x", accumulates=True)
