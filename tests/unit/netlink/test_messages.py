"""Pure tests of rtnetlink packing and parsing, on bytes shaped like the kernel's replies."""

from __future__ import annotations

import errno
import struct
from ipaddress import IPv4Address, ip_address, ip_interface, ip_network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.netlink import messages as m
from local_ccm.netlink import model

NLMSGHDR = struct.Struct("=IHHII")


def rtmsg(family: int, dst_len: int, table: int = 254, rtype: int = 1, scope: int = 0) -> bytes:
    return struct.pack("=BBBBBBBBI", family, dst_len, 0, 0, table, 4, scope, rtype, 0)


def ifaddrmsg(family: int, prefixlen: int, flags: int = 0, scope: int = 0, index: int = 2) -> bytes:
    return struct.pack("=BBBBi", family, prefixlen, flags, scope, index)


def ifinfomsg(index: int, flags: int) -> bytes:
    return struct.pack("=BxHiII", 0, 1, index, flags, 0)


def u32(value: int) -> bytes:
    return struct.pack("=I", value)


# ------------------------------------------------------------------ framing
def test_pack_attr_pads_to_four_bytes_but_records_the_unpadded_length() -> None:
    packed = m.pack_attr(3, b"eth0\0")

    assert len(packed) == 12
    assert struct.unpack_from("=HH", packed) == (9, 3)
    assert packed[9:] == b"\0\0\0"


@given(st.dictionaries(st.integers(1, 0x3FFF), st.binary(max_size=40), max_size=8))
def test_attributes_round_trip(attrs: dict[int, bytes]) -> None:
    packed = b"".join(m.pack_attr(t, v) for t, v in attrs.items())

    assert m.parse_attrs(packed) == attrs


def test_parse_attrs_strips_the_nested_and_byte_order_bits() -> None:
    assert m.parse_attrs(m.pack_attr(0x8000 | 18, b"abcd")) == {18: b"abcd"}


def test_parse_attrs_rejects_an_attribute_running_past_the_end() -> None:
    with pytest.raises(model.MalformedMessageError):
        m.parse_attrs(struct.pack("=HH", 20, 1) + b"abcd")


def test_parse_messages_splits_aligned_messages_in_one_datagram() -> None:
    first = m.pack_message(m.RTM_NEWADDR, m.NLM_F_MULTI, 7, b"abc", pid=42)  # 19 bytes, pad 1
    second = m.pack_message(m.NLMSG_DONE, m.NLM_F_MULTI, 7, u32(0), pid=42)

    parsed = m.parse_messages(first + b"\0" + second)

    assert parsed == [
        m.Message(m.RTM_NEWADDR, m.NLM_F_MULTI, 7, 42, b"abc"),
        m.Message(m.NLMSG_DONE, m.NLM_F_MULTI, 7, 42, u32(0)),
    ]


@pytest.mark.parametrize("length", [8, 64])
def test_parse_messages_rejects_impossible_lengths(length: int) -> None:
    with pytest.raises(model.MalformedMessageError):
        m.parse_messages(NLMSGHDR.pack(length, 24, 0, 1, 0) + b"\0" * 16)


# ------------------------------------------------------------------ requests
def test_route_get_request_for_ipv4_with_oif_and_mark() -> None:
    data = m.build_route_get(IPv4Address("8.8.8.8"), 99, oif=3, mark=0x10)

    length, msg_type, flags, seq, _ = NLMSGHDR.unpack_from(data)
    family, dst_len, *_, rtm_flags = struct.unpack_from("=BBBBBBBBI", data, 16)
    assert (length, msg_type, flags, seq) == (len(data), m.RTM_GETROUTE, m.NLM_F_REQUEST, 99)
    assert (family, dst_len, rtm_flags) == (m.AF_INET, 32, m.RTM_F_LOOKUP_TABLE)
    attrs = m.parse_attrs(data, 28)
    assert attrs == {m.RTA_DST: bytes([8, 8, 8, 8]), m.RTA_OIF: u32(3), m.RTA_MARK: u32(0x10)}


def test_route_get_request_for_ipv6_has_a_128_bit_destination_only() -> None:
    data = m.build_route_get(ip_address("2001:db8::1"), 1)

    family, dst_len = struct.unpack_from("=BB", data, 16)
    assert (family, dst_len) == (m.AF_INET6, 128)
    assert m.parse_attrs(data, 28) == {m.RTA_DST: ip_address("2001:db8::1").packed}


@pytest.mark.parametrize(("family", "af"), [(None, m.AF_UNSPEC), (4, m.AF_INET), (6, m.AF_INET6)])
def test_address_dump_request_filters_by_family(family: int | None, af: int) -> None:
    data = m.build_addr_dump(5, family)

    _, msg_type, flags, seq, _ = NLMSGHDR.unpack_from(data)
    assert (msg_type, flags, seq) == (m.RTM_GETADDR, m.NLM_F_REQUEST | m.NLM_F_DUMP, 5)
    assert data[16] == af


def test_link_requests_dump_all_or_ask_for_one_index_without_stats() -> None:
    dump, one = m.build_link_request(1), m.build_link_request(2, index=7)

    assert NLMSGHDR.unpack_from(dump)[2] == m.NLM_F_REQUEST | m.NLM_F_DUMP
    assert NLMSGHDR.unpack_from(one)[2] == m.NLM_F_REQUEST
    assert struct.unpack_from("=i", one, 20)[0] == 7
    assert m.parse_attrs(one, 32) == {m.IFLA_EXT_MASK: u32(m.RTEXT_FILTER_SKIP_STATS)}


# ------------------------------------------------------------------ errors
def test_error_zero_is_an_ack() -> None:
    assert m.parse_error(m.Message(m.NLMSG_ERROR, 0, 1, 0, struct.pack("=i", 0))) == (0, None)


def test_error_with_extended_ack_text_from_a_capped_reply() -> None:
    payload = struct.pack("=i", -errno.EINVAL) + NLMSGHDR.pack(36, 24, 5, 1, 0)
    payload += m.pack_attr(m.NLMSGERR_ATTR_MSG, b"Nexthop has invalid gateway\0")
    msg = m.Message(m.NLMSG_ERROR, m.NLM_F_CAPPED | m.NLM_F_ACK_TLVS, 1, 0, payload)

    assert m.parse_error(msg) == (errno.EINVAL, "Nexthop has invalid gateway")


def test_error_with_extended_ack_after_the_echoed_request() -> None:
    request = m.build_route_get(IPv4Address("8.8.8.8"), 1)
    payload = struct.pack("=i", -errno.ENETUNREACH) + request
    payload += m.pack_attr(m.NLMSGERR_ATTR_MSG, b"no route\0")
    msg = m.Message(m.NLMSG_ERROR, m.NLM_F_ACK_TLVS, 1, 0, payload)

    assert m.parse_error(msg) == (errno.ENETUNREACH, "no route")


def test_done_carries_the_dump_error_code() -> None:
    msg = m.Message(m.NLMSG_DONE, m.NLM_F_MULTI, 1, 0, struct.pack("=i", -errno.EBUSY))

    assert m.parse_error(msg) == (errno.EBUSY, None)


def test_no_route_error_is_readable_and_keeps_the_errno() -> None:
    err = m.no_route_error(IPv4Address("8.8.8.8"), errno.ENETUNREACH)

    assert isinstance(err, model.NetlinkError)
    assert err.errno == errno.ENETUNREACH
    assert "no route to 8.8.8.8" in str(err)
    assert "(ENETUNREACH)" in str(err)


# ------------------------------------------------------------------ routes
def test_route_reply_with_gateway_source_interface_and_large_table() -> None:
    payload = rtmsg(m.AF_INET, 32, table=252)  # tables above 255 only fit in RTA_TABLE
    payload += m.pack_attr(m.RTA_TABLE, u32(1000)) + m.pack_attr(m.RTA_DST, bytes([8, 8, 8, 8]))
    payload += m.pack_attr(m.RTA_OIF, u32(2)) + m.pack_attr(m.RTA_GATEWAY, bytes([192, 0, 2, 1]))
    payload += m.pack_attr(m.RTA_PREFSRC, bytes([192, 0, 2, 10]))

    route = m.parse_route(payload)

    assert route == model.Route(
        family=4, dst=ip_network("8.8.8.8/32"), type="unicast", table=1000, protocol=4,
        scope=0, oif=2, ifname=None, gateway=ip_address("192.0.2.1"),
        prefsrc=ip_address("192.0.2.10"), priority=None,
    )  # fmt: skip


def test_route_without_destination_is_the_default_route() -> None:
    route = m.parse_route(rtmsg(m.AF_INET6, 0) + m.pack_attr(m.RTA_PRIORITY, u32(1024)))

    assert (route.dst, route.family, route.priority) == (ip_network("::/0"), 6, 1024)
    assert (route.gateway, route.prefsrc) == (None, None)


def test_route_with_an_ipv6_next_hop_via_rta_via() -> None:
    via = struct.pack("=H", m.AF_INET6) + ip_address("fe80::1").packed

    route = m.parse_route(rtmsg(m.AF_INET, 0) + m.pack_attr(m.RTA_VIA, via))

    assert route.gateway == ip_address("fe80::1")


@pytest.mark.parametrize(
    ("rtype", "name"), [(2, "local"), (6, "blackhole"), (7, "unreachable"), (42, "42")]
)
def test_route_types_are_named(rtype: int, name: str) -> None:
    assert m.parse_route(rtmsg(m.AF_INET, 0, rtype=rtype)).type == name


# ------------------------------------------------------------------ addresses
def test_ipv4_address_with_label_lifetimes_and_point_to_point_peer() -> None:
    payload = ifaddrmsg(m.AF_INET, 32, flags=0x01 | 0x80, index=3)
    payload += m.pack_attr(m.IFA_ADDRESS, bytes([192, 0, 2, 1]))  # the peer
    payload += m.pack_attr(m.IFA_LOCAL, bytes([192, 0, 2, 10]))
    payload += m.pack_attr(m.IFA_LABEL, b"eth0:vip\0")
    payload += m.pack_attr(m.IFA_CACHEINFO, struct.pack("=IIII", 0, 3600, 1, 2))

    address = m.parse_address(payload)

    assert address.address == ip_interface("192.0.2.10/32")
    assert (address.peer, address.ifindex, address.prefixlen) == (ip_address("192.0.2.1"), 3, 32)
    assert (address.label, address.ifname) == ("eth0:vip", "eth0")
    assert address.flags == frozenset({"secondary", "permanent"})
    assert (address.preferred_lft, address.valid_lft) == (0, 3600)


def test_ipv6_flags_come_from_ifa_flags_and_bit_one_means_temporary() -> None:
    flags = 0x01 | 0x20 | 0x200 | 0x800  # temporary, deprecated, noprefixroute, stableprivacy
    payload = ifaddrmsg(m.AF_INET6, 64, flags=flags & 0xFF, scope=253)
    payload += m.pack_attr(m.IFA_ADDRESS, ip_address("fe80::1").packed)
    payload += m.pack_attr(m.IFA_FLAGS, u32(flags))
    payload += m.pack_attr(
        m.IFA_CACHEINFO, struct.pack("=IIII", m.INFINITY_LIFE_TIME, m.INFINITY_LIFE_TIME, 0, 0)
    )

    address = m.parse_address(payload)

    assert address.flags == frozenset({"temporary", "deprecated", "noprefixroute", "stableprivacy"})
    assert (address.family, address.scope_name, address.label, address.ifname) == (
        6,
        "link",
        None,
        None,
    )
    assert (address.peer, address.valid_lft, address.preferred_lft) == (None, None, None)


@pytest.mark.parametrize(
    ("bit", "name"),
    [(0x02, "nodad"), (0x04, "optimistic"), (0x08, "dadfailed"), (0x10, "homeaddress"),
     (0x40, "tentative"), (0x100, "managetempaddr"), (0x400, "mcautojoin")],
)  # fmt: skip
def test_every_address_flag_has_its_name(bit: int, name: str) -> None:
    assert m.address_flag_names(bit, 6) == frozenset({name})


def test_address_without_any_address_attribute_is_malformed() -> None:
    with pytest.raises(model.MalformedMessageError):
        m.parse_address(ifaddrmsg(m.AF_INET, 24))


# ------------------------------------------------------------------ links
def test_link_with_kind_operstate_and_flags() -> None:
    linkinfo = m.pack_attr(m.IFLA_INFO_KIND, b"veth\0")
    payload = ifinfomsg(4, 0x1 | 0x40 | 0x10000)
    payload += m.pack_attr(m.IFLA_IFNAME, b"cilium_host\0") + m.pack_attr(m.IFLA_MTU, u32(1450))
    payload += m.pack_attr(m.IFLA_OPERSTATE, b"\x06") + m.pack_attr(
        0x8000 | m.IFLA_LINKINFO, linkinfo
    )

    link = m.parse_link(payload)

    assert link == model.Link(
        index=4, name="cilium_host", flags=frozenset({"up", "running", "lower_up"}), kind="veth",
        operstate="up", mtu=1450, master=None,
    )  # fmt: skip
    assert (link.is_up, link.is_running, link.is_loopback) == (True, True, False)


def test_link_without_linkinfo_has_no_kind() -> None:
    payload = ifinfomsg(1, 0x1 | 0x8) + m.pack_attr(m.IFLA_IFNAME, b"lo\0")

    link = m.parse_link(payload)

    assert (link.kind, link.operstate, link.is_loopback) == (None, "unknown", True)


def test_link_reports_its_hardware_address() -> None:
    mac = bytes.fromhex("525400123402")
    payload = ifinfomsg(2, 0x1) + m.pack_attr(m.IFLA_IFNAME, b"eth0\0")

    assert m.parse_link(payload).mac is None
    assert m.parse_link(payload + m.pack_attr(m.IFLA_ADDRESS, mac)).mac == mac


# ------------------------------------------------------------------ notifications
def test_notifications_become_changes() -> None:
    addr = ifaddrmsg(m.AF_INET, 24) + m.pack_attr(m.IFA_LOCAL, bytes([192, 0, 2, 5]))
    link = ifinfomsg(9, 0) + m.pack_attr(m.IFLA_IFNAME, b"wg0\0")
    route = rtmsg(m.AF_INET6, 0)

    deleted = m.parse_change(m.Message(m.RTM_DELADDR, 0, 0, 0, addr))
    new_link = m.parse_change(m.Message(m.RTM_NEWLINK, 0, 0, 0, link))
    new_route = m.parse_change(m.Message(m.RTM_NEWROUTE, 0, 0, 0, route))

    assert deleted is not None
    assert (deleted.kind, deleted.deleted) == ("address", True)
    assert deleted.address is not None
    assert deleted.address.address == ip_interface("192.0.2.5/24")
    assert new_link is not None
    assert (new_link.kind, new_link.deleted, new_link.link and new_link.link.name) == (
        "link",
        False,
        "wg0",
    )
    assert new_route is not None
    assert new_route.route is not None
    assert (new_route.kind, new_route.route.dst) == ("route", ip_network("::/0"))


def test_multicast_routes_and_other_messages_are_not_changes() -> None:
    ipmr = rtmsg(128, 0)  # RTNL_FAMILY_IPMR

    assert m.parse_change(m.Message(m.RTM_NEWROUTE, 0, 0, 0, ipmr)) is None
    assert m.parse_change(m.Message(m.NLMSG_NOOP, 0, 0, 0, b"")) is None
