"""Interface names and globs, shared by the agent's flags and the pools' L2 announcement."""

from __future__ import annotations

import pytest

from local_ccm.ifnames import IFNAMSIZ, interface_matches, parse_glob
from local_ccm.validate import ValidationError


@pytest.mark.parametrize(
    "pattern", ["eth0", "bond*", "en?s[0-9]", "*", "a" * IFNAMSIZ, "[ab]" + "x" * 20]
)
def test_a_glob_that_can_match_is_kept(pattern: str) -> None:
    assert parse_glob(pattern) == pattern


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("", '"": empty: an interface name has at least one character'),
        ("eth/0", "\"eth/0\": interface names contain no '/' or whitespace"),
        ("eth 0", "\"eth 0\": interface names contain no '/' or whitespace"),
        ("eth0\t", "\"eth0\\t\": interface names contain no '/' or whitespace"),
        ("eth[0", "\"eth[0\": unclosed '[' (a character class is written [...])"),
        ("eth[]", "\"eth[]\": unclosed '[' (a character class is written [...])"),
        ("a" * 16, f'"{"a" * 16}": can never match: interface names have at most 15 characters'),
    ],
)
def test_a_glob_that_can_never_match_a_name_is_refused(pattern: str, reason: str) -> None:
    with pytest.raises(ValidationError) as error:
        parse_glob(pattern)
    assert str(error.value) == reason


@pytest.mark.parametrize(
    ("name", "pattern", "matches"),
    [
        ("eth0", "eth0", True),
        ("eth01", "eth0", False),
        ("bond0", "bond*", True),
        ("bond0.100", "bond*", True),
        ("xbond0", "bond*", False),
        ("ens3", "en?[0-9]", True),
        ("Eth0", "eth0", False),  # names are case-sensitive
    ],
)
def test_a_glob_matches_whole_names(name: str, pattern: str, matches: bool) -> None:
    assert interface_matches(name, pattern) is matches
