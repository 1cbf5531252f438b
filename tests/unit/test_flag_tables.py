"""Flag tables that compose (shared groups, `unite`) and typed values read through each flag's
parser (`Loader`): every problem once, blamed on the spelling or the variable it came from."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from local_ccm.flags import Flag, FlagSet, Loader, parse, unite
from local_ccm.flags.groups import check_metrics_port, logging_flags, metrics_flags
from local_ccm.flags.table import customize
from local_ccm.flags.values import at_least, choice, duration, positive, verbosity
from local_ccm.ipam.options import FLAGS as IPAM_FLAGS
from local_ccm.lease.options import election_flags, election_from
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.validate import ValidationError, each, parse_cidr, parse_families

SET = FlagSet(
    "t",
    [
        Flag("count", "int", 1, "Count.", env=("COUNT",), aliases=("n",), value=at_least(1)),
        Flag("period", "duration", 10, "Period.", value=duration(1.0)),
        Flag("mode", "string", "a", "Mode.", value=choice("a", "b")),
        Flag("cidrs", "string", "", "CIDRs.", value=each(parse_cidr)),
        Flag("raw", "string", "", "No parser."),
        *logging_flags(),
    ],
)


def loader(*argv: str, env: dict[str, str] | None = None) -> Loader:
    return Loader(parse(SET, argv, env or {}))


def lines(read: Loader) -> list[str]:
    return [str(p) for p in read.problems]


def test_values_come_through_the_flags_parsers() -> None:
    read = loader("--count=3", "--mode=b", "--cidrs=10.0.0.0/8", "--v=9")
    assert (read("count"), read("mode"), read("v"), read("raw")) == (3, "b", 5, "")
    assert [str(c) for c in read("cidrs")] == ["10.0.0.0/8"]
    assert read.result("options") == "options"


def test_a_bad_value_is_one_problem_and_the_default_stands_in() -> None:
    read = loader("-n=0")
    assert (read("count"), read("count")) == (1, 1)  # read twice, reported once
    assert lines(read) == ["invalid flag --n: must be at least 1, got 0"]
    assert read.failed == {"count"}
    assert read.result("options") == read.problems


def test_a_bad_value_from_the_environment_names_the_variable() -> None:
    read = loader(env={"COUNT": "0"})
    read("count")
    assert lines(read) == ["invalid environment variable COUNT: must be at least 1, got 0"]


def test_every_bad_item_of_a_list_is_its_own_problem() -> None:
    read = loader("--cidrs=10.0.0.1/8,x,fd00::/8")
    read("cidrs")
    assert len(read.problems) == 2
    assert all(line.startswith("invalid flag --cidrs: invalid CIDR") for line in lines(read))


def test_a_default_its_own_parser_rejects_is_a_programming_error() -> None:
    with pytest.raises(ValidationError):
        Flag("count", "int", 0, "Count.", value=at_least(1))


def test_into_reads_the_fields_named_like_flags_and_takes_the_others() -> None:
    @dataclass(frozen=True)
    class Options:
        count: int
        mode: str
        verbosity: int
        extra: str

    read = loader("--count=2", "--v=1")
    options = read.into(Options, {"verbosity": "v"}, extra="given")
    assert options == Options(count=2, mode="a", verbosity=1, extra="given")


@pytest.mark.parametrize(
    ("check", "value", "reason"),
    [
        (duration(1.0), 0.5, "must be at least 1s, got 500ms"),
        (duration(0.0, 300.0), 301.0, "must be between 0s and 5m0s, got 5m1s"),
        (duration(strict=True), 0.0, "must be > 0, got 0s"),
        (duration(), -1.0, "must be >= 0, got -1s"),
        (positive, 0.0, "must be a finite number > 0, got 0"),
        (positive, float("inf"), "must be a finite number > 0, got inf"),
        (positive, float("nan"), "must be a finite number > 0, got nan"),
        (verbosity, -1, "must be 0 or more, got -1"),
    ],
)
def test_bounds_say_what_is_allowed(check: object, value: float, reason: str) -> None:
    assert callable(check)
    with pytest.raises(ValidationError, match=reason):
        check(value)


def test_ip_families_keep_their_order_and_reject_repeats() -> None:
    assert parse_families("ipv6, ipv4") == ("ipv6", "ipv4")
    assert parse_families("") == ()
    with pytest.raises(ValidationError, match="repeated"):
        parse_families("ipv4,ipv4")


# ---------------------------------------------------------------- composing tables


def test_unite_keeps_a_flag_both_tables_define_once_as_the_first_defines_it() -> None:
    first = [Flag("shared", "string", "first", "First.", aliases=("s",))]
    second = [
        Flag("shared", "string", "second", "Second."),
        Flag("other", "bool", False, "Other.", aliases=("s", "o")),
    ]
    united = unite("both", [first, second], version="1")
    assert [f.name for f in united.flags] == ["shared", "other"]
    assert united.lookup("shared") == first[0]
    assert united.lookup("s") == first[0]  # one meaning per spelling
    assert united.lookup("o") == united.flags[1]


def test_the_central_controllers_tables_unite() -> None:
    united = unite("local-ccm-controller-manager", [LIFECYCLE_FLAGS.flags, IPAM_FLAGS.flags])
    names = [f.name for f in united.flags]
    assert len(names) == len(set(names))
    assert names.count("leader-elect-identity") == 1
    assert united.lookup("leader-elect-id") == LIFECYCLE_FLAGS.lookup("leader-elect-id")


def test_customize_gives_a_group_one_binarys_variables_and_spellings() -> None:
    (flag,) = customize([Flag("x", "int", 0, "X.")], {"x": ("X",)}, {"x": ("ex",)})
    assert (flag.env, flag.aliases) == (("X",), ("ex",))


# ---------------------------------------------------------------- shared groups


def election(
    *argv: str,
    environ: dict[str, str] | None = None,
    env: dict[str, tuple[str, ...]] | None = None,
    aliases: dict[str, tuple[str, ...]] | None = None,
) -> Loader:
    table = FlagSet("e", election_flags("lease", env=env, aliases=aliases))
    return Loader(parse(table, argv, environ or {}))


def test_election_group_defaults_and_values() -> None:
    read = election("--leader-elect-identity=me")
    e = election_from(read)
    assert (e.enabled, e.lease_name, e.namespace, e.identity, e.lock) == (
        True, "lease", "kube-system", "me", "leases",
    )  # fmt: skip
    assert (e.lease_duration, e.renew_deadline, e.retry_period) == (15.0, 10.0, 2.0)
    assert read.problems == []


def test_election_group_needs_a_namespace_when_electing() -> None:
    aliases: dict[str, tuple[str, ...]] = {"leader-elect-resource-namespace": ("namespace",)}
    read = election("--namespace=", aliases=aliases)
    election_from(read)
    assert lines(read) == [
        "invalid flag --namespace: empty (also as --leader-elect-resource-namespace); required "
        "with leader election (a default could put two replicas in different namespaces)"
    ]
    off = election("--leader-elect=false", "--leader-elect-resource-namespace=")
    election_from(off)
    assert off.problems == []


def test_election_durations_name_the_flags_or_what_they_mean() -> None:
    flags_only = election("--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=6s")
    election_from(flags_only)
    assert lines(flags_only) == [
        "invalid flag --leader-elect-lease-duration: must be greater than "
        "--leader-elect-renew-deadline (6s), got 5s"
    ]
    with_env = election("--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=6s",
                        env={"leader-elect-lease-duration": ("LEASE",)})  # fmt: skip
    election_from(with_env)
    assert lines(with_env) == [
        "invalid leader election durations: lease duration must be greater than renew deadline"
    ]


def test_election_namespace_from_a_variable_is_blamed_on_it() -> None:
    read = election(environ={"POD_NAMESPACE": "Bad_NS"},
                    env={"leader-elect-resource-namespace": ("POD_NAMESPACE",)})  # fmt: skip
    election_from(read)
    (line,) = lines(read)
    assert line.startswith("invalid environment variable POD_NAMESPACE: ")


def test_secure_metrics_must_not_share_the_health_port() -> None:
    table = FlagSet("m", [*metrics_flags(":9000", "Metrics."), *logging_flags()])
    read = Loader(parse(table, [], {}))
    metrics = read("metrics-bind-address")
    check_metrics_port(read, metrics, metrics, "health-probe-bind-address")
    (line,) = lines(read)
    assert "must differ from --health-probe-bind-address" in line
    plain = Loader(parse(table, ["--metrics-secure=false"], {}))
    check_metrics_port(plain, metrics, metrics, "health-probe-bind-address")
    assert plain.problems == []
