"""Exponential backoff with jitter, honouring Retry-After, and the request retry policy.

Pure, no I/O: delays are computed from an injected random source; whoever sleeps uses the
injected ``sleep`` of the policy, so tests never wait on the wall clock.

Retry policy (one place, documented):

- reads (GET, and opening a LIST or WATCH) retry on every ``Transient`` kind: 429, 5xx,
  timeouts and connection errors;
- writes (POST, PUT, PATCH, DELETE) retry only when the server certainly did not act:
  429 (rejected by flow control before processing) and connection failures that
  happened before the request was sent (``Transient.request_sent`` is False);
- a write that failed ambiguously (timeout, reset or 5xx after sending) is NOT resent:
  the caller re-reads and recomputes, as every loop in this project does;
- nothing else is retried here (Conflict, Invalid, Forbidden, NotFound, Gone are for
  the caller's policy).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import field
from typing import Protocol

from local_ccm.kube.errors import ApiError, Transient
from local_ccm.records import dataclass

READ_METHODS = frozenset({"GET", "HEAD"})


class Rng(Protocol):
    def random(self) -> float: ...


@dataclass(frozen=True)
class Backoff:
    """``initial * factor**attempt`` capped at ``cap``, with ±``jitter`` (a fraction) or,
    with ``full_jitter``, uniform in [0, that]."""

    initial: float = 0.2
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2
    full_jitter: bool = False

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.cap and self.factor >= 1 and 0 <= self.jitter <= 1):
            raise ValueError(f"bad backoff parameters: {self}")

    @property
    def min_delay(self) -> float:
        return 0.0 if self.full_jitter else self.initial * (1 - self.jitter)

    def base_delay(self, attempt: int) -> float:
        """The un-jittered delay before retry number ``attempt`` (0-based), capped."""
        # Compare exponents rather than computing factor**attempt, which overflows.
        if self.factor > 1 and attempt > 0:
            limit = self.cap / self.initial
            steps, value = 0, 1.0
            while steps < attempt and value < limit:
                value *= self.factor
                steps += 1
            return min(self.cap, self.initial * value)
        return self.initial

    def next_delay(
        self, attempt: int, retry_after: float | None = None, rng: Rng | None = None
    ) -> float:
        """Seconds to wait; never less than ``retry_after`` unless that exceeds ``cap``."""
        rng = rng or random.Random()
        base = self.base_delay(max(0, attempt))
        if self.full_jitter:
            delay = base * rng.random()
        else:
            delay = base * (1 + self.jitter * (2 * rng.random() - 1))
        if retry_after is not None:
            delay = max(delay, retry_after)
        return max(self.min_delay, min(self.cap, delay))


@dataclass(frozen=True)
class RetryPolicy:
    """How the client retries one request; ``max_attempts=1`` disables retries."""

    max_attempts: int = 3
    backoff: Backoff = Backoff(initial=0.2, cap=10.0)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    rng: Rng = field(default_factory=random.Random, compare=False)

    def should_retry(self, method: str, error: ApiError, attempt: int) -> bool:
        """``attempt`` is the 1-based number of the attempt that just failed."""
        if attempt >= self.max_attempts or not isinstance(error, Transient):
            return False
        if method.upper() in READ_METHODS:
            return True
        return error.status == 429 or not error.request_sent

    def delay(self, error: ApiError, attempt: int) -> float:
        return self.backoff.next_delay(attempt - 1, error.retry_after, self.rng)
