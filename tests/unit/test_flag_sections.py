"""`--help` in sections (`by_owner`): the process's flags first, then each owner's own."""

from __future__ import annotations

import pytest

from local_ccm.flags import Flag, FlagSet, Section, format_usage
from local_ccm.flags.groups import by_owner


def f(name: str) -> Flag:
    return Flag(name, "string", "", f"{name} help")


SHARED = [f("kubeconfig"), f("v")]
A = [*SHARED, f("health"), f("a-only"), f("a-and-c")]
B = [*SHARED, f("b-only")]
C = [*SHARED, *A[2:], f("c-only")]  # a managed owner that carries A's table


def test_shared_flags_go_first_then_what_each_owner_declares_first() -> None:
    sections = by_owner("Process", [f("controllers")], [("a", A), ("b", B), ("c", C)],
                        process=["health"])  # fmt: skip
    assert sections == (
        Section("Process", ("controllers", "kubeconfig", "v", "health")),
        Section("a", ("a-only", "a-and-c")),
        Section("b", ("b-only",)),
        Section("c", ("c-only",)),
    )


def test_an_owner_with_nothing_of_its_own_gets_no_section() -> None:
    owners = [("a", A), ("b", B), ("nothing", SHARED)]
    assert [s.title for s in by_owner("P", [], owners)] == ["P", "a", "b"]


def test_usage_prints_each_section_sorted_and_the_rest_last() -> None:
    table = FlagSet("prog", [f("zeta"), f("alpha"), f("mid")],
                    sections=(Section("First", ("zeta", "alpha")),))  # fmt: skip
    lines = format_usage(table).splitlines()
    assert lines[:5] == ["Usage: prog [flags]", "", "First:", "  -alpha string", "    \talpha help"]
    assert lines.index("Other flags:") > lines.index("  -zeta string")
    assert lines[lines.index("Other flags:") + 1] == "  -mid string"


def test_a_section_naming_an_undeclared_flag_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="undeclared"):
        FlagSet("prog", [f("a")], sections=(Section("S", ("a", "nope")),))
