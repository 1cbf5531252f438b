"""The Redfish client against a scripted loopback BMC (tests/support/fakebmc.py), for what the
real emulator cannot do: keep-alive, Redfish sessions, garbage, slow and silent answers,
server errors, and a record of how many requests were in flight at once."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from local_ccm.bmc.core.address import parse_address
from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.redfish import Exchange, RedfishClient
from tests.support.fakebmc import (
    PASSWORD,
    SESSIONS_PATH,
    SYSTEM_PATH,
    USERNAME,
    FakeBmc,
    Reply,
    silent_listener,
)

T = TypeVar("T")


def client(bmc: FakeBmc, **options: object) -> RedfishClient:
    options.setdefault("ca_pem", bmc.ca_pem)
    creds = Credentials(USERNAME, str(options.pop("password", PASSWORD)))
    return RedfishClient(parse_address(bmc.address()), creds, **options)  # type: ignore[arg-type]


def use(redfish: RedfishClient, work: Callable[[RedfishClient], Awaitable[T]]) -> T:
    async def run() -> T:
        try:
            return await work(redfish)
        finally:
            await redfish.close()

    return asyncio.run(run())


def failure(redfish: RedfishClient) -> BmcError:
    with pytest.raises(BmcError) as caught:
        use(redfish, lambda c: c.get_system())
    return caught.value


# ---------------------------------------------------------------- keep-alive and concurrency


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_sequential_requests_share_one_connection(tls: bool) -> None:
    with FakeBmc(tls=tls) as bmc:
        redfish = client(bmc)

        async def twenty(c: RedfishClient) -> None:
            for _ in range(20):
                assert (await c.get_system()).power_state == "On"

        use(redfish, twenty)
        assert bmc.connections == 1
        assert redfish.connections_opened == 1
        assert len(bmc.requests("GET", SYSTEM_PATH)) == 20


def test_a_connection_the_bmc_closed_while_idle_is_replaced_without_an_error() -> None:
    with FakeBmc() as bmc:
        bmc.script.drop_idle = True  # every connection ends after one answer, unannounced
        seen: list[Exchange] = []
        redfish = client(bmc, on_exchange=seen.append)

        async def three(c: RedfishClient) -> None:
            for _ in range(3):
                await c.get_system()

        use(redfish, three)
        assert all(e.error is None and e.status == 200 for e in seen)
        assert bmc.connections == 4  # the root, then one per GET
        assert {s.connection for s in bmc.requests("GET", SYSTEM_PATH)} == {2, 3, 4}


def test_never_two_requests_in_flight_to_one_bmc() -> None:
    with FakeBmc() as bmc:
        bmc.script.delay = 0.05
        redfish = client(bmc)

        async def many(c: RedfishClient) -> list[str]:
            systems = await asyncio.gather(*(c.get_system() for _ in range(10)),
                                           c.reset("ForceOff"), c.get_system())  # fmt: skip
            return [s.power_state for s in systems if s is not None]

        states = use(redfish, many)
        assert states[:10] == ["On"] * 10
        assert states[10] == "Off"
        assert bmc.max_in_flight == 1
        assert bmc.connections == 1


def test_a_bmc_trickling_its_answer_is_a_timeout_of_the_whole_call() -> None:
    with FakeBmc() as bmc:
        bmc.script.trickle = 0.2  # every read gets a byte well within the read timeout
        redfish = client(bmc, read_timeout=1.0, call_timeout=3.0)
        start = time.monotonic()
        error = failure(redfish)
        assert time.monotonic() - start < 6.0
        assert (error.kind, error.message) == (
            "timeout",
            "no complete answer within 3s (the BMC answers too slowly)",
        )
        # The service root was trickled; the System was never asked for after the call gave up.
        assert [(s.method, s.path) for s in bmc.requests()] == [("GET", "/redfish/v1/")]
        bmc.script.trickle = 0.0
        assert use(client(bmc), lambda c: c.get_system()).power_state == "On"


def test_a_cancelled_call_ends_its_request_at_once_and_is_not_sent_again() -> None:
    with FakeBmc() as bmc:
        redfish = client(bmc, read_timeout=30.0)

        async def cancel_then_read(c: RedfishClient) -> float:
            await c.get_system()
            bmc.script.hang = True
            slow = asyncio.ensure_future(c.get_system())
            await asyncio.sleep(0.2)
            slow.cancel()
            bmc.script.hang = False
            start = time.monotonic()
            assert (await c.get_system()).power_state == "On"
            return time.monotonic() - start

        # Not the 30 s read timeout: cancelling shut the hung request's socket down.
        assert use(redfish, cancel_then_read) < 5.0
        gets = bmc.requests("GET", SYSTEM_PATH)
        # The hung GET went out once (a cancelled request is never sent again), and the next
        # one on a new connection.
        assert [g.connection for g in gets] == [1, 1, 2]


# ---------------------------------------------------------------- failures


def test_garbage_json_is_an_invalid_response() -> None:
    with FakeBmc() as bmc:
        bmc.script.reply = Reply(200, b"{'PowerState': On")
        error = failure(client(bmc))
        assert error.kind == "invalid-response"
        assert "not JSON" in error.message


def test_a_power_state_of_the_wrong_type_is_an_invalid_response() -> None:
    with FakeBmc() as bmc:
        bmc.script.reply = Reply(200, b'{"PowerState": 1}')
        assert failure(client(bmc)).kind == "invalid-response"


def test_an_answer_that_is_not_http_is_an_invalid_response() -> None:
    with FakeBmc() as bmc:
        bmc.script.raw = b"SSH-2.0-OpenSSH_9.2\r\n"
        error = failure(client(bmc))
        assert error.kind == "invalid-response"
        assert "not an HTTP answer" in error.message


def test_a_slow_bmc_is_a_timeout_within_the_bound() -> None:
    with FakeBmc() as bmc:
        bmc.script.delay = 5.0
        start = time.monotonic()
        error = failure(client(bmc, read_timeout=0.5))
        elapsed = time.monotonic() - start
        assert error.kind == "timeout"
        assert "no answer within 0.5s" in error.message
        assert elapsed < 2.0


def test_a_bmc_that_never_completes_the_tls_handshake_is_a_timeout() -> None:
    with silent_listener() as port:
        address = parse_address(f"redfish://127.0.0.1:{port}/redfish/v1/Systems/1")
        redfish = RedfishClient(address, Credentials("a", "b"), connect_timeout=0.5)
        start = time.monotonic()
        error = failure(redfish)
        assert error.kind == "timeout"
        assert "no TLS handshake within 0.5s" in error.message
        assert time.monotonic() - start < 2.0


def test_a_closed_port_is_unreachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    address = parse_address(f"redfish+http://127.0.0.1:{port}/redfish/v1/Systems/1")
    error = failure(RedfishClient(address, Credentials("a", "b")))
    assert error.kind == "unreachable"
    assert "Connection refused" in error.message


def test_plain_http_to_a_tls_bmc_is_a_dropped_connection() -> None:
    with FakeBmc(tls=True) as bmc:
        address = parse_address(f"redfish+http://127.0.0.1:{bmc.port}{SYSTEM_PATH}")
        error = failure(RedfishClient(address, Credentials(USERNAME, PASSWORD), read_timeout=2))
        assert error.kind == "unreachable"
        assert "the BMC dropped the connection" in error.message


@pytest.mark.parametrize(
    ("reply", "kind", "retry_after"),
    [
        (Reply(429, b"", (("Retry-After", "7"),)), "server-error", 7.0),
        (Reply(503, b'{"error": {"message": "busy"}}', (("Retry-After", "3"),)),
         "server-error", 3.0),
        (Reply(500, b"<html>"), "server-error", None),
        (Reply(403, b""), "auth", None),
        (Reply(404, b""), "not-found", None),
        (Reply(302, b"", (("Location", "/elsewhere"),)), "invalid-response", None),
    ],
)  # fmt: skip
def test_an_error_status_is_its_kind(reply: Reply, kind: str, retry_after: float | None) -> None:
    with FakeBmc() as bmc:
        bmc.script.reply = reply
        error = failure(client(bmc))
        assert (error.kind, error.status, error.retry_after) == (kind, reply.status, retry_after)


def test_a_404_on_the_reset_action_is_rejected_not_gone() -> None:
    with FakeBmc() as bmc:
        redfish = client(bmc)

        async def reset(c: RedfishClient) -> None:
            await c.get_system()
            bmc.script.reply = Reply(404, b"")
            await c.reset("ForceOff")

        with pytest.raises(BmcError) as caught:
            use(redfish, reset)
        assert caught.value.kind == "rejected"


# ---------------------------------------------------------------- Redfish sessions


def test_auto_auth_uses_a_session_where_the_service_offers_one_and_logs_out() -> None:
    with FakeBmc(sessions=True) as bmc:
        redfish = client(bmc)

        async def twice(c: RedfishClient) -> str | None:
            await c.get_system()
            await c.get_system()
            return c.auth_in_use

        assert use(redfish, twice) == "session"
        assert len(bmc.requests("POST", SESSIONS_PATH)) == 1
        gets = bmc.requests("GET", SYSTEM_PATH)
        assert all("x-auth-token" in g.headers and "authorization" not in g.headers for g in gets)
        logout = bmc.requests("DELETE")
        assert len(logout) == 1
        assert logout[0].path.startswith(SESSIONS_PATH + "/")
        assert not bmc.script.tokens  # the session is gone on the BMC


def test_an_expired_session_is_made_again_once() -> None:
    with FakeBmc(sessions=True) as bmc:
        redfish = client(bmc)

        async def across_expiry(c: RedfishClient) -> str:
            await c.get_system()
            bmc.expire_sessions()
            return (await c.get_system()).power_state

        assert use(redfish, across_expiry) == "On"
        assert len(bmc.requests("POST", SESSIONS_PATH)) == 2


def test_a_refused_login_is_auth_without_falling_back_to_basic() -> None:
    with FakeBmc(sessions=True) as bmc:
        error = failure(client(bmc, password="wrong"))
        assert (error.kind, error.status) == ("auth", 401)
        assert bmc.requests("GET", SYSTEM_PATH) == []


def test_basic_auth_when_forced_skips_the_service_root() -> None:
    with FakeBmc(sessions=True) as bmc:
        assert use(client(bmc, auth="basic"), lambda c: c.get_system()).power_state == "On"
        assert [s.path for s in bmc.seen] == [SYSTEM_PATH]


@pytest.mark.parametrize(
    "login",
    [Reply(404, b""), Reply(405, b""), Reply(500, b""), Reply(201, b"{}")],
    ids=["404", "405", "500", "201-without-a-token"],
)
def test_a_session_the_service_cannot_make_falls_back_to_basic(login: Reply) -> None:
    with FakeBmc(sessions=True) as bmc:
        bmc.script.login = login
        assert use(client(bmc), lambda c: c.get_system()).power_state == "On"
        assert [(s.method, s.path) for s in bmc.seen] == [
            ("GET", "/redfish/v1/"), ("POST", SESSIONS_PATH), ("GET", SYSTEM_PATH)]  # fmt: skip
        assert "authorization" in bmc.seen[-1].headers


def test_a_forced_session_that_cannot_be_made_is_an_error_not_basic() -> None:
    with FakeBmc(sessions=True) as bmc:
        bmc.script.login = Reply(201, b"{}")
        error = failure(client(bmc, auth="session"))
        assert error.kind == "invalid-response"
        assert "no X-Auth-Token" in error.message
        assert bmc.requests("GET", SYSTEM_PATH) == []


def test_a_ca_bundle_that_is_not_pem_is_tls_when_the_client_is_made() -> None:
    address = parse_address("redfish://127.0.0.1:9/redfish/v1/Systems/1")
    with pytest.raises(BmcError) as caught:
        RedfishClient(address, Credentials("a", "b"), ca_pem="not a certificate")
    assert caught.value.kind == "tls"
    assert "the CA bundle is not usable PEM" in caught.value.message
