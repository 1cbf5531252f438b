"""ARP and NDP frames byte for byte: what is parsed, what is dropped and why, what is built."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.announce.core import packets
from local_ccm.announce.core.packets import ArpRequest, Link, Solicitation


def v4(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


def v6(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


MAC = bytes.fromhex("525400123402")  # ours
ASKER = bytes.fromhex("525400123401")
VIP = v4("192.0.2.10")
VIP6 = v6("2001:db8:2000:aff0::2")
LINK = Link(MAC, v6("fe80::5054:ff:fe12:3402"))


def fold(data: bytes) -> int:
    """The textbook Internet checksum (RFC 1071): sum 16-bit words, fold carries, invert. An
    independent check of the module's modulo arithmetic."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return int(~total & 0xFFFF)


def pseudo(src: bytes, dst: bytes, icmp: bytes) -> bytes:
    return src + dst + len(icmp).to_bytes(4, "big") + b"\x00\x00\x00\x3a" + icmp


def arp_frame(*, oper: int = 1, sha: bytes = ASKER, spa: bytes = v4("192.0.2.1"),
              tpa: bytes = VIP, dst: bytes = packets.BROADCAST, src: bytes = ASKER,
              fixed: bytes = bytes.fromhex("000108000604")) -> bytes:  # fmt: skip
    return dst + src + b"\x08\x06" + fixed + struct.pack("!H", oper) + sha + spa + bytes(6) + tpa


def ns_frame(*, src: bytes = v6("2001:db8:2000:aff0::1"), target: bytes = VIP6,
             dst: bytes | None = None, options: bytes = b"\x01\x01" + ASKER, hops: int = 255,
             code: int = 0, next_header: int = 58, eth_src: bytes = ASKER,
             checksum: int | None = None, icmp_type: int = 135) -> bytes:  # fmt: skip
    """A Neighbor Solicitation, to the target's solicited-node group unless `dst` is given."""
    group, group_mac = packets.solicited_node(ipaddress.IPv6Address(target))
    dst = group.packed if dst is None else dst
    body = struct.pack("!BBHI16s", icmp_type, code, 0, 0, target) + options
    cks = fold(pseudo(src, dst, body)) if checksum is None else checksum
    body = body[:2] + cks.to_bytes(2, "big") + body[4:]
    header = struct.pack("!IHBB16s16s", 6 << 28, len(body), next_header, hops, src, dst)
    eth_dst = group_mac if dst == group.packed else MAC
    return eth_dst + eth_src + b"\x86\xdd" + header + body


# ------------------------------------------------------------------ ARP


def test_an_arp_request_is_read_field_by_field() -> None:
    request = packets.parse_arp_request(arp_frame() + bytes(18))  # padded to 60 on the wire
    assert request == ArpRequest(packets.BROADCAST, ASKER, v4("192.0.2.1"), VIP)
    assert not request.probe
    assert not request.announcement


def test_a_probe_and_an_announcement_are_told_apart() -> None:
    probe = packets.parse_arp_request(arp_frame(spa=bytes(4)))
    claim = packets.parse_arp_request(arp_frame(spa=VIP))
    assert probe is not None
    assert probe.probe
    assert claim is not None
    assert claim.announcement


def test_the_reply_is_unicast_to_the_asker_byte_for_byte() -> None:
    request = ArpRequest(packets.BROADCAST, ASKER, v4("192.0.2.1"), VIP)
    assert packets.arp_reply(request, MAC).hex() == (
        "525400123401" "525400123402" "0806"  # to the asker, from us
        "0001" "0800" "06" "04" "0002"  # Ethernet, IPv4, reply
        "525400123402" "c000020a"  # sha, spa: VIP is-at MAC
        "525400123401" "c0000201"  # tha, tpa: the asker
        + "00" * 18  # padded to the 60-byte minimum
    )  # fmt: skip


def test_a_probe_is_answered_to_0_0_0_0_as_linux_does() -> None:
    request = packets.parse_arp_request(arp_frame(spa=bytes(4)))
    assert request is not None
    reply = packets.arp_reply(request, MAC)
    assert reply[38:42] == bytes(4)
    assert reply[:6] == ASKER


def test_gratuitous_arp_sends_the_request_and_the_reply_form_broadcast() -> None:
    request, reply = packets.gratuitous_arp(VIP, MAC)
    head = "ffffffffffff5254001234020806000108000604"
    assert request.hex() == (head + "0001" "525400123402" "c000020a" "000000000000" "c000020a"
                             + "00" * 18)  # fmt: skip
    assert reply.hex() == (head + "0002" "525400123402" "c000020a" "525400123402" "c000020a"
                           + "00" * 18)  # fmt: skip


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "truncated Ethernet header"),
        (arp_frame()[:13], "truncated Ethernet header"),
        (arp_frame()[:41], "truncated ARP packet"),
        (arp_frame()[:12] + b"\x81\x00" + arp_frame()[12:], "VLAN-tagged frame"),
        (arp_frame(oper=2), "ARP operation 2 is not a request"),
        (arp_frame(fixed=bytes.fromhex("000608000604")), "not ARP for IPv4 over Ethernet"),
        (arp_frame(fixed=bytes.fromhex("000186dd0610")), "not ARP for IPv4 over Ethernet"),
        (arp_frame(sha=packets.BROADCAST), "ARP sender hardware address is a group address"),
        (arp_frame(src=bytes.fromhex("010000000001")), "Ethernet source is a group address"),
    ],
)
def test_what_is_not_an_arp_request_is_dropped_with_a_reason(frame: bytes, reason: str) -> None:
    assert packets.parse_arp_request(frame) is None
    assert packets.drop_reason(frame) == reason


# ------------------------------------------------------------------ NDP


def test_a_solicitation_to_the_solicited_node_group_is_read() -> None:
    ns = packets.parse_solicitation(ns_frame())
    group = v6("ff02::1:ff00:2")
    assert ns == Solicitation(ASKER, b"\x33\x33\xff\x00\x00\x02", v6("2001:db8:2000:aff0::1"),
                              group, VIP6, ASKER)  # fmt: skip
    assert not ns.dad
    assert packets.drop_reason(ns_frame()) == ""


def test_a_unicast_probe_may_come_without_a_source_address_option() -> None:
    ns = packets.parse_solicitation(ns_frame(dst=VIP6, options=b""))
    assert ns is not None
    assert ns.source_lla is None


def test_a_dad_solicitation_is_read() -> None:
    ns = packets.parse_solicitation(ns_frame(src=bytes(16), options=b""))
    assert ns is not None
    assert ns.dad


def test_unknown_options_are_skipped() -> None:
    nonce = b"\x0e\x01" + bytes(6)  # RFC 3971's nonce option
    ns = packets.parse_solicitation(ns_frame(options=nonce + b"\x01\x01" + ASKER))
    assert ns is not None
    assert ns.source_lla == ASKER


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (ns_frame()[:53], "truncated IPv6 header"),
        (ns_frame()[:70], "truncated IPv6 payload"),
        (ns_frame()[:14] + b"\x40" + ns_frame()[15:], "IP version is not 6"),
        (ns_frame(next_header=0), "next header 0 is not ICMPv6"),
        (ns_frame(icmp_type=136), "not a neighbour solicitation"),
        (ns_frame(icmp_type=128), "not a neighbour solicitation"),
        (ns_frame(hops=64), "hop limit 64 is not 255"),
        (ns_frame(code=1), "ICMPv6 code 1 is not 0"),
        (ns_frame(checksum=0x1234), "bad ICMPv6 checksum"),
        (ns_frame(target=v6("ff02::1")), "target is a multicast address"),
        (ns_frame(src=v6("ff02::2")), "source is a multicast address"),
        (ns_frame(options=b"\x01\x00" + bytes(6)), "malformed option"),
        (ns_frame(options=b"\x01"), "malformed option"),
        (ns_frame(options=b"\x05\x02" + bytes(6)), "truncated option"),
        (ns_frame(options=b"\x01\x02" + bytes(14)), "source link-layer address option is not "
                                                    "Ethernet's"),
        (ns_frame(src=bytes(16)), "DAD solicitation not to a solicited-node group or with a "
                                  "source address option"),
        (ns_frame(src=bytes(16), options=b"", dst=VIP6), "DAD solicitation not to a "
                                                         "solicited-node group or with a source "
                                                         "address option"),
        (ns_frame()[:12] + b"\x81\x00" + ns_frame()[12:], "VLAN-tagged frame"),
    ],
)  # fmt: skip
def test_what_is_not_a_valid_solicitation_is_dropped_with_a_reason(
    frame: bytes, reason: str
) -> None:
    assert packets.parse_solicitation(frame) is None
    assert packets.drop_reason(frame) == reason


def test_a_short_solicitation_is_dropped() -> None:
    frame = ns_frame()
    short = bytearray(frame[: 54 + 20])
    short[18:20] = (20).to_bytes(2, "big")
    assert packets.drop_reason(bytes(short)) == "neighbour solicitation shorter than 24 bytes"


def test_the_advertisement_matches_a_frame_wireshark_checked() -> None:
    """A solicited NA captured and decoded by Wireshark (checksum 0x9638 "correct"): the same
    addresses give the same 86 bytes."""
    link = Link(MAC, VIP6)  # that capture's source was the target itself
    ns = Solicitation(ASKER, MAC, v6("2001:db8:2000:aff0::1"), VIP6, VIP6, None)
    assert packets.advertisement_for(ns, link).hex() == (
        "525400123401" "525400123402" "86dd"
        "60000000" "0020" "3a" "ff" "20010db82000aff00000000000000002"
        "20010db82000aff00000000000000001"
        "88" "00" "9638" "60000000" "20010db82000aff00000000000000002" "0201" "525400123402"
    )  # fmt: skip


def test_a_solicited_answer_goes_to_the_source_link_layer_option() -> None:
    ns = packets.parse_solicitation(ns_frame(eth_src=bytes.fromhex("020000000099")))
    assert ns is not None
    na = packets.advertisement_for(ns, LINK)
    assert na[:6] == ASKER  # the option, not the frame's source
    assert na[22:38] == LINK.link_local
    assert na[38:54] == ns.src
    assert na[58] & 0xE0 == 0x60  # S and O, not R


def test_a_group_address_in_the_source_option_is_refused_as_an_arp_sender_is() -> None:
    """A solicited answer to a broadcast MAC would go to every host on the link."""
    broadcast = b"\x01\x01" + b"\xff" * 6
    assert packets.parse_solicitation(ns_frame(options=broadcast)) is None
    multicast = b"\x01\x01" + bytes.fromhex("333300000001")
    assert packets.parse_solicitation(ns_frame(options=multicast)) is None


def test_a_dad_answer_goes_to_all_nodes_without_s() -> None:
    ns = packets.parse_solicitation(ns_frame(src=bytes(16), options=b""))
    assert ns is not None
    na = packets.advertisement_for(ns, LINK)
    assert na[:6] == packets.ALL_NODES_MAC
    assert na[38:54] == packets.ALL_NODES
    assert na[58] & 0xE0 == 0x20  # O only


def test_the_unsolicited_advertisement_is_valid_and_checksummed() -> None:
    na = packets.unsolicited_advertisement(VIP6, LINK)
    assert len(na) == 86
    assert na[:12] == packets.ALL_NODES_MAC + MAC
    assert na[20:22] == b"\x3a\xff"  # ICMPv6, hop limit 255
    icmp = na[54:]
    assert icmp[:2] == b"\x88\x00"  # type 136, code 0
    assert icmp[8:] == VIP6 + b"\x02\x01" + MAC  # the target, then its link-layer address
    assert fold(pseudo(LINK.link_local, packets.ALL_NODES, icmp)) == 0


@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16),
       st.binary(min_size=6, max_size=6), st.booleans())  # fmt: skip
def test_every_advertisement_checksum_agrees_with_the_textbook_one(
    target: bytes, source: bytes, mac: bytes, solicited: bool
) -> None:
    na = packets.advertisement(Link(mac, source), target, packets.ALL_NODES, ASKER, solicited)
    icmp = na[54:]
    zeroed = icmp[:2] + b"\x00\x00" + icmp[4:]
    assert int.from_bytes(icmp[2:4], "big") == fold(pseudo(source, packets.ALL_NODES, zeroed))


def test_the_solicited_node_group_of_rfc_4291s_example() -> None:
    group, mac = packets.solicited_node(ipaddress.IPv6Address("4037::1:800:200e:8c6c"))
    assert group == ipaddress.IPv6Address("ff02::1:ff0e:8c6c")
    assert mac == bytes.fromhex("3333ff0e8c6c")


# ------------------------------------------------------------------ answering


OWNED = frozenset({VIP, VIP6})


def test_an_owned_address_is_answered() -> None:
    assert packets.answer(arp_frame(), LINK, OWNED) == packets.arp_reply(
        ArpRequest(packets.BROADCAST, ASKER, v4("192.0.2.1"), VIP), MAC
    )
    ns = packets.parse_solicitation(ns_frame())
    assert ns is not None
    assert packets.answer(ns_frame(), LINK, OWNED) == packets.advertisement_for(ns, LINK)
    assert packets.answer(ns_frame(dst=VIP6, options=b""), LINK, OWNED) is not None
    assert packets.answer(arp_frame(dst=MAC), LINK, OWNED) is not None


@pytest.mark.parametrize(
    "frame",
    [
        arp_frame(tpa=v4("192.0.2.11")),  # not ours
        arp_frame(dst=bytes.fromhex("020000000042")),  # unicast to another host
        arp_frame(src=MAC, sha=MAC),  # our own
        arp_frame(oper=2),  # a reply
        ns_frame(target=v6("2001:db8:2000:aff0::3")),  # not ours
        ns_frame(dst=v6("ff02::1:ff00:3")),  # another group
        ns_frame(dst=v6("2001:db8::9"), options=b""),  # unicast to another address
        ns_frame(hops=1),  # invalid
        ns_frame()[:12] + b"\x08\x00" + ns_frame()[14:],  # IPv4
    ],
)
def test_anything_else_is_not_answered(frame: bytes) -> None:
    assert packets.answer(frame, LINK, OWNED) is None


def test_a_solicitation_to_the_group_but_another_hosts_mac_is_not_answered() -> None:
    frame = bytes.fromhex("020000000042") + ns_frame()[6:]
    assert packets.answer(frame, LINK, OWNED) is None


def _mutations() -> st.SearchStrategy[bytes]:
    valid = [arp_frame(), ns_frame(), ns_frame(src=bytes(16), options=b"")]
    return st.sampled_from(valid) | st.builds(
        lambda frame, at, value, cut: (frame[:at] + bytes([value]) + frame[at + 1 :])[:cut],
        st.sampled_from(valid),
        st.integers(0, 85),
        st.integers(0, 255),
        st.integers(0, 90),
    )


@given(st.binary(max_size=120) | _mutations())
def test_no_input_makes_a_parser_raise(frame: bytes) -> None:
    packets.parse_arp_request(frame)
    packets.parse_solicitation(frame)
    packets.drop_reason(frame)
    packets.answer(frame, LINK, OWNED)
