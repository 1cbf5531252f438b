"""`eventually`: what counts as found and what as "not yet"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.waiting import eventually


def _answers(*values: object) -> Iterator[object]:
    yield from values
    while True:
        yield values[-1]


@pytest.mark.parametrize("empty", [None, False, [], {}, "", 0, ()])
def test_an_empty_answer_is_not_yet_found(empty: object) -> None:
    answers = _answers(empty, empty, ["10.0.0.0/24"])
    assert eventually(lambda: next(answers), timeout=5, interval=0) == ["10.0.0.0/24"]


def test_the_first_truthy_answer_is_returned_as_it_is() -> None:
    found = {"ipv4": {"free": 3}}
    answers = _answers({}, found, {"other": 1})
    assert eventually(lambda: next(answers), timeout=5, interval=0) is found


def test_exceptions_are_not_yet_and_the_last_one_is_reported() -> None:
    def probe() -> object:
        raise LookupError("no such Node yet")

    with pytest.raises(AssertionError, match="no such Node yet"):
        eventually(probe, timeout=0.05, interval=0.01, message="the Node")


def test_a_timeout_shows_the_last_empty_answer() -> None:
    with pytest.raises(AssertionError, match=r"pool status within 0.05s; last: \[\]"):
        eventually(lambda: [], timeout=0.05, interval=0.01, message="pool status")
