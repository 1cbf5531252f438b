"""The one way integration tests wait: poll a predicate until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    predicate: Callable[[], T | bool | None],
    *,
    timeout: float,
    interval: float = 0.1,
    message: str = "",
) -> T:
    """Call `predicate` until it returns something truthy and return that value.

    Exceptions from the predicate count as "not yet"; on timeout the AssertionError shows the
    last value or exception, so a failure says what the world looked like.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # a failing probe means "not yet"
            value, last = None, exc
        else:
            last = value
        if value is not None and value is not False:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"{message or 'condition not met'} within {timeout}s; last: {last!r}"
            )
        time.sleep(interval)
