"""Properties of the Go-compatible flag parser (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from local_ccm.flags import (
    Flag,
    FlagSet,
    Parsed,
    parse,
    usage_error,
)
from local_ccm.gosyntax import (
    GoSyntaxError,
    format_go_duration,
    format_go_duration_ns,
    parse_go_bool,
    parse_go_duration,
    parse_go_duration_ns,
    parse_go_int,
)

FLAGS = FlagSet(
    "prog",
    [
        Flag("name", "string", "", "A string.", env=("NAME",)),
        Flag("count", "int", 0, "An int.", env=("COUNT", "LEGACY_COUNT")),
        Flag("ratio", "float", 1.0, "A float."),
        Flag("period", "duration", 10, "A duration.", env=("PERIOD",)),
        Flag("on", "bool", False, "A bool.", env=("ON",)),
        Flag("format", "string", "text", "With an alias.", aliases=("logging-format",)),
    ],
    subcommands=frozenset({"detect"}),
    version="1",
)
VALUE_FLAGS = ("name", "count", "ratio", "period", "format", "logging-format")
BOOL_SPELLINGS = ("1", "0", "t", "f", "T", "F", "true", "false", "TRUE", "FALSE", "True", "False")
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

values = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["10s", "1m30s", "0", "1.5h", "-3ms", "10", "0x10", "1e3", ".5"]),
)
# Arguments as a user might type them: flags in every form, values, junk.
tokens = st.one_of(
    st.tuples(st.sampled_from(VALUE_FLAGS), values).map(lambda p: f"--{p[0]}={p[1]}"),
    st.sampled_from(VALUE_FLAGS).map(lambda n: f"--{n}"),
    st.sampled_from(["--on", "--on=false", "--on=x", "--", "-h", "--version", "---x", "-=y"]),
    st.sampled_from(["--logtostderr", "--log_dir", "--bogus", "detect", "false", "-", ""]),
    values,
)
# Well-formed units: (the first string is a flag, the strings). A value is never a flag
# position, so rewriting the flag's dashes cannot change which string is a value.
flag_units = st.one_of(
    st.tuples(st.sampled_from(VALUE_FLAGS), values).map(lambda p: [f"--{p[0]}={p[1]}"]),
    st.tuples(st.sampled_from(VALUE_FLAGS), values).map(lambda p: [f"--{p[0]}", p[1]]),
    st.sampled_from([["--on"], ["--on=false"], ["--on=x"], ["--logtostderr"], ["--bogus=1"]]),
    st.sampled_from([["--h"], ["--help"], ["--version"], ["--vmodule=x"]]),
    values.map(lambda v: ["--log_dir", v]),
)
positional_units = values.filter(lambda v: not v.startswith("-")).map(lambda v: [v])
units = st.lists(
    st.one_of(flag_units.map(lambda u: (True, u)), positional_units.map(lambda u: (False, u))),
    max_size=6,
)
environments = st.dictionaries(
    st.sampled_from(["NAME", "COUNT", "LEGACY_COUNT", "PERIOD", "ON", "OTHER"]), values
)


def settled(parsed: Parsed) -> tuple[object, ...]:
    return (
        parsed.values,
        parsed.sources,
        parsed.problems,
        parsed.subcommand,
        parsed.help_requested,
    )


# ---------------------------------------------------------------- scalars


@given(INT64)
def test_duration_format_then_parse_round_trips_integral_nanoseconds(nanoseconds: int) -> None:
    assert parse_go_duration_ns(format_go_duration_ns(nanoseconds)) == nanoseconds


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_duration_seconds_round_trip_through_go_text(nanoseconds: int) -> None:
    seconds = nanoseconds / 1e9
    assert parse_go_duration(format_go_duration(seconds)) == seconds


@given(st.text(max_size=20))
def test_duration_parser_either_returns_an_int64_or_raises_go_syntax_error(text: str) -> None:
    try:
        nanoseconds = parse_go_duration_ns(text)
    except GoSyntaxError:
        return
    assert -(2**63) <= nanoseconds <= 2**63 - 1


@given(INT64, st.sampled_from([str, hex, oct, bin]))
def test_int_parses_python_renderings_of_int64(number: int, render: object) -> None:
    assert callable(render)
    text = str(render(number)).replace("0o", "0o" if number % 2 else "0O")
    assert parse_go_int(text) == number


@given(st.sampled_from(BOOL_SPELLINGS))
def test_every_go_bool_spelling_sets_the_flag(spelling: str) -> None:
    parsed = parse(FLAGS, [f"--on={spelling}"], {})
    assert parsed.problems == ()
    assert parsed.values["on"] is parse_go_bool(spelling)
    assert parsed.values["on"] is (spelling.lower() in ("1", "t", "true"))


@given(st.text(max_size=8).filter(lambda s: s not in BOOL_SPELLINGS))
def test_any_other_bool_spelling_is_a_problem(spelling: str) -> None:
    parsed = parse(FLAGS, [f"--on={spelling}"], {})
    assert [p.flag for p in parsed.problems] == ["on"]
    assert parsed.values["on"] is False


# ---------------------------------------------------------------- parser


@given(st.lists(st.text()), st.dictionaries(st.text(), st.text()))
def test_parse_never_raises_on_arbitrary_text(argv: list[str], env: dict[str, str]) -> None:
    assert isinstance(parse(FLAGS, argv, env), Parsed)


@given(st.lists(tokens, max_size=8), environments)
def test_parse_never_raises_on_plausible_command_lines(
    argv: list[str], env: dict[str, str]
) -> None:
    parsed = parse(FLAGS, argv, env)
    assert set(parsed.values) == {flag.name for flag in FLAGS.flags}
    assert parsed.explicit == {n for n, s in parsed.sources.items() if s != "default"}


@given(units, environments)
def test_single_dash_is_equivalent_to_double_dash(
    argv_units: list[tuple[bool, list[str]]], env: dict[str, str]
) -> None:
    double = [part for _, unit in argv_units for part in unit]
    single = [
        part[1:] if is_flag and i == 0 else part
        for is_flag, unit in argv_units
        for i, part in enumerate(unit)
    ]
    assert settled(parse(FLAGS, single, env)) == settled(parse(FLAGS, double, env))


@given(st.lists(st.tuples(st.sampled_from(VALUE_FLAGS), values), max_size=6))
def test_equals_form_is_equivalent_to_space_form(pairs: list[tuple[str, str]]) -> None:
    joined = [f"--{name}={value}" for name, value in pairs]
    spaced = [part for name, value in pairs for part in (f"--{name}", value)]
    assert settled(parse(FLAGS, joined, {})) == settled(parse(FLAGS, spaced, {}))


@given(st.lists(st.text(), min_size=1, max_size=6))
def test_last_occurrence_wins_for_strings(names: list[str]) -> None:
    parsed = parse(FLAGS, [f"--name={name}" for name in names], {})
    assert parsed.values["name"] == names[-1]


@given(st.lists(INT64, min_size=1, max_size=6), st.booleans())
def test_last_occurrence_wins_across_forms(numbers: list[int], single: bool) -> None:
    dash = "-" if single else "--"
    argv = [part for n in numbers for part in (f"{dash}count", str(n))]
    assert parse(FLAGS, argv, {"COUNT": "7"}).values["count"] == numbers[-1]


@given(st.lists(tokens, max_size=8), environments)
def test_every_problem_appears_in_the_usage_error(argv: list[str], env: dict[str, str]) -> None:
    parsed = parse(FLAGS, argv, env)
    lines = usage_error("prog", parsed.problems).split("\n")
    assert lines == [*(str(p) for p in parsed.problems), "run 'prog --help' for usage"]


@given(st.lists(st.text(), max_size=6))
def test_every_problem_appears_in_the_usage_error_for_arbitrary_text(argv: list[str]) -> None:
    parsed = parse(FLAGS, argv, {})
    text = usage_error("prog", parsed.problems)
    assert all(str(p) in text for p in parsed.problems)
    assert text.endswith("run 'prog --help' for usage")


@given(units, st.text(min_size=1), st.text(min_size=1))
def test_flag_beats_env_beats_default(
    argv_units: list[tuple[bool, list[str]]], from_env: str, from_flag: str
) -> None:
    others = [part for _, unit in argv_units if unit[0] != "--name" for part in unit]
    others = [part for part in others if not part.startswith("--name=")]
    env = {"NAME": from_env}
    assert parse(FLAGS, [*others, "--name", from_flag], env).values["name"] == from_flag
    assert parse(FLAGS, others, env).values["name"] == from_env
    assert parse(FLAGS, others, {}).values["name"] == ""


@given(
    st.lists(st.text(), max_size=6), st.dictionaries(st.sampled_from(["NAME", "PERIOD"]), st.text())
)
def test_every_problem_is_exactly_one_line(argv: list[str], env: dict[str, str]) -> None:
    for problem in parse(FLAGS, argv, env).problems:
        assert str(problem).isprintable()
