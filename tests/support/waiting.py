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

    Falsy is "not yet", whatever its type: None, False, and also an empty list, dict or string
    and 0, so a probe may return what it read (`status.get("ipv4")`) without `or None`, and an
    empty answer never passes as found. Exceptions from the predicate count as "not yet"; on
    timeout the AssertionError shows the last value or exception, so a failure says what the
    world looked like.
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
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"{message or 'condition not met'} within {timeout}s; last: {last!r}"
            )
        time.sleep(interval)
