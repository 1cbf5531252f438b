"""The start-up permission check of node-ipam-controller and its effect on
/readyz: an API server that does not answer is waited for, never a crash; a stop ends the wait;
rejected credentials and missing permissions still end the process (exit 4)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

import pytest

from local_ccm import flags
from local_ccm.clock import SystemClock
from local_ccm.ipam import options as opts
from local_ccm.ipam.main import Health, PreconditionFailed, check_access
from local_ccm.ipam.options import FLAGS
from local_ccm.kube.errors import ApiError, Transient, Unauthorized
from tests.fakes.nodes import FakeNodeApi


def scripted(errors: list[ApiError], denied: frozenset[str] = frozenset()) -> FakeNodeApi:
    """Reviews raise the scripted errors first, then answer."""
    api = FakeNodeApi()
    api.ssar_fail_next, api.denied = errors, set(denied)
    return api


def options() -> opts.IpamOptions:
    loaded = opts.options_from(flags.parse(FLAGS, ["--enable-leader-election=false"], {}), {})
    assert isinstance(loaded, opts.IpamOptions), loaded
    return loaded


def run(coro: Coroutine[Any, Any, bool]) -> bool:
    return asyncio.run(coro)


class InstantClock(SystemClock):
    """Backoff sleeps return at once; `stop` (if given) is set by the first one."""

    def __init__(self, stop: asyncio.Event | None = None) -> None:
        self.stop, self.slept = stop, 0

    async def sleep(self, seconds: float) -> None:
        self.slept += 1
        if self.stop is not None:
            self.stop.set()
        await asyncio.sleep(0)


def check(api: FakeNodeApi, stop: asyncio.Event, clock: InstantClock) -> bool:
    return run(check_access(api, options(), stop, clock, random.Random(1)))  # type: ignore[arg-type]


def refused() -> Transient:
    return Transient(0, "ConnectionError", "[Errno 111] Connection refused")


def test_an_unanswering_api_server_is_retried_until_the_review_passes() -> None:
    api = scripted([refused() for _ in range(5)])
    clock = InstantClock()
    assert check(api, asyncio.Event(), clock) is True
    assert api.reviews > 5
    assert clock.slept == 5


def test_a_stop_while_waiting_for_the_api_server_ends_the_check_without_a_verdict() -> None:
    stop = asyncio.Event()
    api = scripted([refused() for _ in range(1000)])
    assert check(api, stop, InstantClock(stop)) is False
    assert api.reviews == 1


def test_rejected_credentials_end_the_process() -> None:
    api = scripted([Unauthorized(401, "Unauthorized", "token expired")])
    with pytest.raises(PreconditionFailed, match="rejected the credentials"):
        check(api, asyncio.Event(), InstantClock())


def test_missing_permissions_end_the_process_listing_them() -> None:
    api = scripted([], denied=frozenset({"patch nodes"}))
    with pytest.raises(PreconditionFailed, match=r"missing RBAC permissions: .*patch nodes"):
        check(api, asyncio.Event(), InstantClock())


def test_readyz_is_503_until_the_permission_check_passed() -> None:
    health = Health()
    assert health.readyz() == (False, "starting: checking RBAC permissions")
    health.started = True
    assert health.readyz() == (True, "standby")
