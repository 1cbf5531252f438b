"""The Redfish client against the real BMC emulator (sushy-tools, tests/support/sushy.py):
HTTPS with the test PKI, Basic auth, the fake driver's Systems. Each test uses Systems of its
own; one that stops the emulator or rotates its password puts it back."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from local_ccm.bmc.core.address import parse_address
from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.system import System
from local_ccm.bmc.redfish import Exchange, RedfishClient
from tests.support import pki
from tests.support.sushy import SushyEmulator

# sushy-tools applies a power action 1 to 11 s after it was asked (fakedriver.set_power_state).
POWER_DELAY_BOUND = 13.0


def client(sushy: SushyEmulator, name: str, **options: object) -> RedfishClient:
    creds = Credentials(sushy.username, sushy.password)
    options.setdefault("ca_pem", sushy.ca_pem)
    return RedfishClient(parse_address(sushy.address(name)), creds, **options)  # type: ignore[arg-type]


def read(bmc: RedfishClient) -> System:
    async def once() -> System:
        try:
            return await bmc.get_system()
        finally:
            await bmc.close()

    return asyncio.run(once())


def failure(bmc: RedfishClient) -> BmcError:
    with pytest.raises(BmcError) as caught:
        read(bmc)
    return caught.value


async def wait_for_power(bmc: RedfishClient, state: str, bound: float) -> float:
    start = time.monotonic()
    while (await bmc.get_system()).power_state != state:
        assert time.monotonic() - start < bound, f"not {state} after {bound}s"
        await asyncio.sleep(0.25)
    return time.monotonic() - start


def test_the_power_state_and_the_system_are_read(sushy: SushyEmulator) -> None:
    seen: list[Exchange] = []
    system = read(client(sushy, "bmc-0", on_exchange=seen.append))
    assert system.power_state == "On"
    assert (system.id, system.name, system.manufacturer, system.health) == (
        sushy.systems["bmc-0"],
        "bmc-0",
        "Sushy Emulator",
        "OK",
    )
    assert system.reset.target == sushy.system_path("bmc-0") + "/Actions/ComputerSystem.Reset"
    assert system.reset.allowed is not None
    assert {"On", "ForceOff"} <= set(system.reset.allowed)
    # The service root first (it names no session service: Basic auth), then the System.
    assert [(e.method, e.path, e.status, e.error) for e in seen] == [
        ("GET", "/redfish/v1/", 200, None),
        ("GET", sushy.system_path("bmc-0"), 200, None),
    ]
    assert all(0 < e.seconds < 5 for e in seen)


def test_auto_auth_falls_back_to_basic_on_the_emulator(sushy: SushyEmulator) -> None:
    async def run() -> str | None:
        bmc = client(sushy, "bmc-0")
        await bmc.get_system()
        # Basic on every request: no session to log out of; the emulator would 404 a login.
        login = {"UserName": sushy.username, "Password": sushy.password}
        status = sushy.request("POST", "/redfish/v1/SessionService/Sessions", login)[0]
        assert status == 404
        mode = bmc.auth_in_use
        await bmc.close()
        return mode

    assert asyncio.run(run()) == "basic"


def test_force_off_then_on_takes_effect_after_the_emulators_delay(sushy: SushyEmulator) -> None:
    async def run() -> tuple[float, float]:
        bmc = client(sushy, "bmc-1")
        try:
            assert (await bmc.get_system()).power_state == "On"
            await bmc.reset("ForceOff")
            off = await wait_for_power(bmc, "Off", POWER_DELAY_BOUND)
            await bmc.reset("On")
            on = await wait_for_power(bmc, "On", POWER_DELAY_BOUND)
            return off, on
        finally:
            await bmc.close()

    off, on = asyncio.run(run())
    assert off < POWER_DELAY_BOUND
    assert on < POWER_DELAY_BOUND


def test_power_changed_behind_the_clients_back_is_seen(sushy: SushyEmulator) -> None:
    sushy.set_power("bmc-2", "Off")
    assert read(client(sushy, "bmc-2")).power_state == "Off"
    sushy.set_power("bmc-2", "On")
    assert read(client(sushy, "bmc-2")).power_state == "On"


def test_a_reset_type_the_system_does_not_offer_is_rejected(sushy: SushyEmulator) -> None:
    async def run() -> BmcError:
        bmc = client(sushy, "bmc-2")
        try:
            with pytest.raises(BmcError) as caught:
                await bmc.reset("PushPowerButton")
            return caught.value
        finally:
            await bmc.close()

    error = asyncio.run(run())
    assert error.kind == "rejected"
    assert "does not offer ResetType PushPowerButton" in error.message


def test_a_removed_system_is_not_found(sushy: SushyEmulator) -> None:
    assert read(client(sushy, "bmc-3")).power_state == "On"
    sushy.remove_system("bmc-3")
    error = failure(client(sushy, "bmc-3"))
    assert (error.kind, error.status) == ("not-found", 404)
    assert sushy.system_path("bmc-3") in error.message


def test_a_system_added_while_running_is_served(sushy: SushyEmulator) -> None:
    sushy.add_system("bmc-new", power_state="Off")
    assert read(client(sushy, "bmc-new")).power_state == "Off"


def test_a_wrong_password_is_auth(sushy: SushyEmulator) -> None:
    bmc = RedfishClient(parse_address(sushy.address("bmc-4")), Credentials(sushy.username, "no"),
                        ca_pem=sushy.ca_pem)  # fmt: skip
    error = failure(bmc)
    assert (error.kind, error.status) == ("auth", 401)
    assert "Incorrect username or password" in error.message


def test_a_rotated_password_is_auth_until_the_client_has_it(sushy: SushyEmulator) -> None:
    old = sushy.password

    async def run() -> BmcError:
        bmc = client(sushy, "bmc-4")
        try:
            await bmc.get_system()
            sushy.set_password("rotated-password")
            with pytest.raises(BmcError) as caught:
                await bmc.get_system()
            bmc.set_credentials(Credentials(sushy.username, "rotated-password"))
            assert (await bmc.get_system()).power_state == "On"
            return caught.value
        finally:
            await bmc.close()

    try:
        assert asyncio.run(run()).kind == "auth"
    finally:
        sushy.set_password(old)


def test_a_stopped_emulator_is_unreachable_and_a_restarted_one_is_read_again(
    sushy: SushyEmulator,
) -> None:
    async def run() -> BmcError:
        bmc = client(sushy, "bmc-5", connect_timeout=2.0)
        try:
            await bmc.get_system()
            sushy.stop()
            with pytest.raises(BmcError) as caught:
                await bmc.get_system()
            sushy.start()
            assert (await bmc.get_system()).power_state == "On"
            return caught.value
        finally:
            await bmc.close()

    try:
        error = asyncio.run(run())
    finally:
        sushy.start()
    assert error.kind == "unreachable"
    assert "Connection refused" in error.message


def test_a_certificate_from_another_ca_is_tls(sushy: SushyEmulator) -> None:
    other = pki.new_ca("another-ca", datetime.now(UTC)).cert_pem.decode()
    error = failure(client(sushy, "bmc-6", ca_pem=other))
    assert error.kind == "tls"
    assert "certificate refused" in error.message


def test_the_system_trust_store_does_not_trust_the_test_ca(sushy: SushyEmulator) -> None:
    assert failure(client(sushy, "bmc-6", ca_pem=None)).kind == "tls"


def test_verification_off_when_asked_reads_the_system(sushy: SushyEmulator) -> None:
    assert read(client(sushy, "bmc-6", ca_pem=None, verify=False)).power_state == "On"


def test_each_answer_closes_the_connection_so_each_request_dials(sushy: SushyEmulator) -> None:
    """sushy-tools' server sends Connection: close with every answer: the client dials again
    for each request instead of failing on a closed one (keep-alive: test_redfish_faults)."""
    seen: list[Exchange] = []

    async def run() -> int:
        bmc = client(sushy, "bmc-7", on_exchange=seen.append)
        try:
            for _ in range(5):
                await bmc.get_system()
            return bmc.connections_opened
        finally:
            await bmc.close()

    assert asyncio.run(run()) == 6  # the service root and five GETs
    assert all(e.new_connection for e in seen)


def test_a_system_named_by_its_name_is_a_redirect_that_says_where_it_points(
    sushy: SushyEmulator,
) -> None:
    # The emulator answers 307 to its UUID path; the client follows no redirect (the
    # credentials would go along), so the operator reads which address to write instead.
    address = parse_address(f"redfish://127.0.0.1:{sushy.port}/redfish/v1/Systems/bmc-0")
    creds = Credentials(sushy.username, sushy.password)
    error = failure(RedfishClient(address, creds, ca_pem=sushy.ca_pem))
    assert (error.kind, error.status) == ("invalid-response", 307)
    assert sushy.system_path("bmc-0") in error.message
    assert error.message.endswith("not followed: write the address it names in spec.address")
