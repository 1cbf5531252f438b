"""node-bmc's clients (`bmc.clients.Pollers`) against the scripted loopback BMC: a client kept
from poll to poll (one connection), made anew for a new address or CA, handed rotated
credentials in place, closed when dropped; one request in flight per BMC endpoint even for
two NodeBMCs naming it; every request in the controller's own thread pool."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import pytest

from local_ccm.bmc.clients import Pollers
from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.spec import BmcSpec, parse_spec
from local_ccm.bmc.redfish import Exchange
from local_ccm.clock import SystemClock
from tests.support.fakebmc import PASSWORD, SYSTEM_PATH, USERNAME, FakeBmc

T = TypeVar("T")
RIGHT = Credentials(USERNAME, PASSWORD)


def spec_of(bmc: FakeBmc, **more: object) -> BmcSpec:
    fields = {"address": bmc.address(), "credentialsName": "s", "caBundle": bmc.ca_pem, **more}
    parsed = parse_spec(fields)
    assert isinstance(parsed, BmcSpec), parsed
    return parsed


def run(work: Callable[[Pollers], Awaitable[T]], seen: list[Exchange] | None = None) -> T:
    """`work` on a fresh `Pollers` with a pool of its own, closed at the end."""
    executor = ThreadPoolExecutor(4, thread_name_prefix="bmc")

    async def go() -> T:
        pollers = Pollers(executor, SystemClock(), (seen if seen is not None else []).append,
                          connect_timeout=2.0, read_timeout=2.0)  # fmt: skip
        try:
            return await work(pollers)
        finally:
            await pollers.close()

    try:
        return asyncio.run(go())
    finally:
        executor.shutdown()


def test_polls_of_one_nodebmc_share_one_client_and_one_connection() -> None:
    with FakeBmc(tls=True) as bmc:

        async def five(p: Pollers) -> int:
            for _ in range(5):
                assert (await p.read("n1", spec_of(bmc), RIGHT)).power_state == "On"
            return len(p)

        seen: list[Exchange] = []
        assert run(five, seen) == 1
        assert bmc.connections == 1
        assert len(bmc.requests("GET", SYSTEM_PATH)) == 5
        assert {e.method for e in seen} == {"GET"}  # the latency metric sees every request


def test_rotated_credentials_are_used_in_place_and_a_new_ca_makes_a_new_client() -> None:
    with FakeBmc(tls=True) as bmc:

        async def rotate(p: Pollers) -> BmcError:
            await p.read("n1", spec_of(bmc), RIGHT)
            with pytest.raises(BmcError) as refused:
                await p.read("n1", spec_of(bmc), Credentials(USERNAME, "wrong"))
            await p.read("n1", spec_of(bmc), RIGHT)
            assert bmc.connections == 1  # the same client and connection throughout
            await p.read("n1", spec_of(bmc, disableCertificateVerification=True), RIGHT)
            return refused.value

        assert run(rotate).kind == "auth"
        assert bmc.connections == 2  # verification off: another client, another connection


def test_a_ca_bundle_that_is_not_pem_is_a_tls_error_and_nothing_is_contacted() -> None:
    with FakeBmc(tls=True) as bmc:

        async def bad(p: Pollers) -> BmcError:
            with pytest.raises(BmcError) as caught:
                await p.read("n1", spec_of(bmc, caBundle="not a certificate"), RIGHT)
            return caught.value

        assert run(bad).kind == "tls"
        assert bmc.connections == 0


def test_two_nodebmcs_of_one_bmc_never_have_two_requests_in_flight() -> None:
    with FakeBmc() as bmc:
        bmc.script.delay = 0.05

        async def both(p: Pollers) -> None:
            spec = spec_of(bmc)
            reads = [p.read(key, spec, RIGHT) for key in ("a", "b", "c") for _ in range(3)]
            await asyncio.gather(*reads)

        run(both)
        assert bmc.max_in_flight == 1
        assert len(bmc.requests("GET", SYSTEM_PATH)) == 9


class Counting(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(2, thread_name_prefix="bmc")
        self.submitted = 0

    def submit(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_requests_run_in_the_pool_given_not_the_event_loops_default_one() -> None:
    pool = Counting()
    with FakeBmc() as bmc:

        async def read() -> None:
            pollers = Pollers(pool, SystemClock(), lambda e: None, connect_timeout=2.0,
                              read_timeout=2.0)  # fmt: skip
            await pollers.read("n1", spec_of(bmc), RIGHT)
            await pollers.read("n1", spec_of(bmc), RIGHT)
            await pollers.close()

        asyncio.run(read())
    pool.shutdown()
    assert pool.submitted == 3  # two polls and the close


def test_dropping_a_nodebmc_closes_its_client() -> None:
    with FakeBmc(sessions=True) as bmc:

        async def drop(p: Pollers) -> int:
            await p.read("n1", spec_of(bmc), RIGHT)
            await p.drop("n1")
            return len(p)

        assert run(drop) == 0
        assert len(bmc.requests("DELETE")) == 1  # the Redfish session logged out
