"""The prober's pure parts: echo packets, errno classification, concurrency and cancellation.

Real sockets are exercised in tests/netns/lifecycle/; here `probe_one` is replaced by a
subclass driven by asyncio events, so nothing is sent and nothing sleeps.
"""

from __future__ import annotations

import asyncio
import errno
import struct

import pytest

from local_ccm.lifecycle.core.model import (
    ICMP,
    IPAddress,
    OutcomeKind,
    ProbeKind,
    ProbeOutcome,
    tcp,
)
from local_ccm.lifecycle.probe import (
    Capabilities,
    Capability,
    CapabilityReport,
    ProbeConfig,
    Prober,
    SocketProber,
    capability_report,
    echo_request,
    errno_outcome,
    parse_echo_reply,
)
from tests.fakes.lifecycle import FakeProber, addresses

USABLE = Capabilities(
    tuple(Capability(k, f, True, "raw" if k == "icmp" else None)
          for k in ("icmp", "tcp") for f in ("ipv4", "ipv6"))
)  # fmt: skip


def test_echo_request_v4_has_a_valid_checksum() -> None:
    packet = echo_request(4, 0x1234, 7, b"token-token-16by")
    assert packet[0] == 8
    assert struct.unpack("!HH", packet[4:8]) == (0x1234, 7)
    words = struct.unpack(f"!{len(packet) // 2}H", packet)
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    assert total == 0xFFFF


def test_echo_request_v6_leaves_the_checksum_to_the_kernel() -> None:
    packet = echo_request(6, 1, 2, b"t")
    assert (packet[0], packet[2:4]) == (128, b"\0\0")


def test_parse_echo_reply_skips_the_ipv4_header_of_raw_sockets() -> None:
    icmp = bytes([0, 0, 0, 0]) + struct.pack("!HH", 9, 3) + b"payload"
    ip_header = bytes([0x45]) + bytes(19)
    assert parse_echo_reply(ip_header + icmp, 4, ip_header=True) == (9, 3, b"payload")
    assert parse_echo_reply(icmp, 4, ip_header=False) == (9, 3, b"payload")


def test_parse_echo_reply_ignores_requests_and_errors() -> None:
    request = echo_request(4, 1, 1, b"x")
    assert parse_echo_reply(request, 4, ip_header=False) is None
    unreachable = bytes([3, 1, 0, 0]) + bytes(30)
    assert parse_echo_reply(unreachable, 4, ip_header=False) is None
    assert parse_echo_reply(b"", 4, ip_header=True) is None
    assert parse_echo_reply(bytes([129, 0, 0, 0, 0, 1, 0, 2]), 6, ip_header=False) == (1, 2, b"")


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (errno.ENETUNREACH, "no_route"),
        (errno.EHOSTUNREACH, "no_reply"),
        (errno.ETIMEDOUT, "no_reply"),
        (errno.EPERM, "error"),
        (errno.EACCES, "error"),
        (errno.EAFNOSUPPORT, "error"),
        (None, "error"),
    ],
)
def test_errno_outcome(code: int | None, outcome: str) -> None:
    assert errno_outcome(code)[0] == outcome


def test_nothing_usable_blocks_and_lists_every_problem_in_one_line() -> None:
    caps = Capabilities((
        Capability("icmp", "ipv4", False, problem="no NET_RAW"),
        Capability("icmp", "ipv6", False, problem="no IPv6"),
    ))  # fmt: skip
    report = capability_report(caps)
    assert report.blocking
    assert report.message.startswith("no configured probe is usable, so every verdict is "
                                      "unknown and no Node is deleted")  # fmt: skip
    assert report.message.endswith(": no NET_RAW; no IPv6")
    assert "\n" not in report.message


def test_some_usable_is_a_warning_and_all_usable_or_unprobed_says_nothing() -> None:
    caps = Capabilities((
        Capability("icmp", "ipv4", True, "datagram"),
        Capability("icmp", "ipv6", False, problem="no IPv6"),
    ))  # fmt: skip
    warning = "some probes are unusable, their verdicts are unknown: no IPv6"
    assert capability_report(caps) == CapabilityReport(False, warning)
    assert capability_report(USABLE) == CapabilityReport(False, "")
    assert capability_report(Capabilities(())) == CapabilityReport(False, "")


def test_unusable_combination_is_an_error_outcome_without_any_socket() -> None:
    caps = Capabilities((Capability("icmp", "ipv6", False, problem="IPv6 absent"),))
    prober = SocketProber(ProbeConfig(), caps)
    result = asyncio.run(prober.probe(addresses("::1", "127.0.0.1"), [ICMP]))
    assert [(str(o.address), o.outcome, o.detail) for o in result] == [
        ("::1", "error", "IPv6 absent"),
        ("127.0.0.1", "error", "probe kind not configured"),
    ]


class ScriptedProber(SocketProber):
    """`probe_one` waits for the test to release an outcome per address."""

    def __init__(self, concurrency: int) -> None:
        super().__init__(ProbeConfig(concurrency=concurrency), USABLE)
        self.release: dict[str, asyncio.Future[OutcomeKind]] = {}
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def probe_one(self, address: IPAddress, kind: ProbeKind) -> ProbeOutcome:
        self.started.append(str(address))
        future = self.release.setdefault(str(address), asyncio.get_running_loop().create_future())
        try:
            return ProbeOutcome(address, kind, await future)
        except asyncio.CancelledError:
            self.cancelled.append(str(address))
            raise


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_concurrency_is_bounded_fifo_and_the_first_reply_cancels_the_rest() -> None:
    async def scenario() -> tuple[ProbeOutcome, ...]:
        prober = ScriptedProber(concurrency=2)
        targets = addresses("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
        run = asyncio.create_task(prober.probe(targets, [ICMP]))
        await _settle()
        assert (prober.started, prober.in_flight) == (["127.0.0.2", "127.0.0.3"], 2)
        prober.release["127.0.0.2"].set_result("no_reply")
        await _settle()
        assert prober.started == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        prober.release["127.0.0.4"].set_result("reply")
        result = await run
        # everything still running when the reply came was cancelled, nothing finished late
        unfinished = [a for a in prober.started if a not in ("127.0.0.2", "127.0.0.4")]
        assert "127.0.0.3" in unfinished
        assert prober.cancelled == unfinished
        assert prober.in_flight == 0
        return result

    result = asyncio.run(scenario())
    assert [(str(o.address), o.outcome) for o in result] == [
        ("127.0.0.2", "no_reply"), ("127.0.0.4", "reply"),
    ]  # fmt: skip


def test_cancelling_a_node_probe_cancels_every_address_probe() -> None:
    async def scenario() -> ScriptedProber:
        prober = ScriptedProber(concurrency=8)
        run = asyncio.create_task(prober.probe(addresses("127.0.0.2", "::1"), [ICMP, tcp(1)]))
        await _settle()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return prober

    prober = asyncio.run(scenario())
    assert sorted(prober.cancelled) == ["127.0.0.2", "127.0.0.2", "::1", "::1"]
    assert prober.in_flight == 0


def test_fake_prober_satisfies_the_protocol_and_stops_at_the_first_reply() -> None:
    fake: Prober = FakeProber({"::1": "reply"})
    result = asyncio.run(fake.probe(addresses("198.51.100.9", "::1", "127.0.0.9"), [ICMP]))
    assert [o.outcome for o in result] == ["no_reply", "reply"]
    real: Prober = SocketProber(ProbeConfig(), USABLE)
    assert real is not None
