"""rtnetlink message building and parsing: pure, no I/O.

Byte layouts follow <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_addr.h> and
<linux/if_link.h>. Families are reported as IP versions (4 or 6), never as AF_* numbers, so
callers can compare them with ``ipaddress`` objects' ``.version``.
"""

from __future__ import annotations

import errno as errno_mod
import os
import struct
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_interface, ip_network

from local_ccm.netlink.model import (
    Address,
    Change,
    IPAddress,
    Link,
    MalformedMessageError,
    NoRouteError,
    Route,
)
from local_ccm.records import dataclass

# ------------------------------------------------------------------ constants
AF_UNSPEC, AF_INET, AF_INET6 = 0, 2, 10
_AF_BY_VERSION = {4: AF_INET, 6: AF_INET6}
_VERSION_BY_AF = {AF_INET: 4, AF_INET6: 6}

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
NLM_F_REQUEST, NLM_F_MULTI = 0x1, 0x2
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200  # flags of an NLMSG_ERROR reply
NLMSGERR_ATTR_MSG = 1

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26

# RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE
DEFAULT_GROUPS = 0x1 | 0x10 | 0x100 | 0x40 | 0x400

RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC = 1, 4, 5, 6, 7
RTA_TABLE, RTA_MARK, RTA_VIA = 15, 16, 18
RTM_F_LOOKUP_TABLE = 0x1000  # report the table that matched, not RT_TABLE_MAIN

IFA_ADDRESS, IFA_LOCAL, IFA_LABEL, IFA_CACHEINFO, IFA_FLAGS = 1, 2, 3, 6, 8
IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_OPERSTATE, IFLA_LINKINFO = 3, 4, 10, 16, 18
IFLA_ADDRESS = 1  # the link's hardware address (a MAC on Ethernet)
IFLA_EXT_MASK, IFLA_INFO_KIND = 29, 1
RTEXT_FILTER_SKIP_STATS = 0x8  # keep link dumps small: the agent never reads counters

INFINITY_LIFE_TIME = 0xFFFFFFFF
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED and NLA_F_NET_BYTEORDER

ROUTE_TYPES = (
    "unspec", "unicast", "local", "broadcast", "anycast", "multicast",
    "blackhole", "unreachable", "prohibit", "throw", "nat", "xresolve",
)  # fmt: skip
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
LINK_FLAGS = {
    0x1: "up", 0x2: "broadcast", 0x8: "loopback", 0x10: "pointopoint", 0x40: "running",
    0x80: "noarp", 0x100: "promisc", 0x1000: "multicast", 0x10000: "lower_up", 0x20000: "dormant",
}  # fmt: skip
# 0x01 is IFA_F_SECONDARY for IPv4 and IFA_F_TEMPORARY (privacy address) for IPv6.
ADDRESS_FLAGS = {
    0x02: "nodad", 0x04: "optimistic", 0x08: "dadfailed", 0x10: "homeaddress",
    0x20: "deprecated", 0x40: "tentative", 0x80: "permanent", 0x100: "managetempaddr",
    0x200: "noprefixroute", 0x400: "mcautojoin", 0x800: "stableprivacy",
}  # fmt: skip
# What IPv4 reports for a failed lookup; IPv6 returns these types as a route instead.
ROUTE_TYPE_ERRNO = {
    "blackhole": errno_mod.EINVAL,
    "unreachable": errno_mod.EHOSTUNREACH,
    "prohibit": errno_mod.EACCES,
    "throw": errno_mod.EAGAIN,
}
NO_ROUTE_ERRNOS = frozenset(
    {errno_mod.ENETUNREACH, errno_mod.EHOSTUNREACH, errno_mod.EINVAL, errno_mod.EACCES,
     errno_mod.EAGAIN, errno_mod.ENETDOWN}
)  # fmt: skip

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
# family, dst_len, src_len, tos, table, proto, scope, type, flags
_RTMSG = struct.Struct("=BBBBBBBBI")
_IFADDRMSG = struct.Struct("=BBBBi")  # family, prefixlen, flags, scope, index
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_RTATTR = struct.Struct("=HH")  # len, type
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")
_CACHEINFO = struct.Struct("=IIII")  # preferred, valid, cstamp, tstamp


# ------------------------------------------------------------------ errors
def error_name(err: int) -> str:
    return errno_mod.errorcode.get(err, f"errno {err}")


def no_route_error(dst: IPAddress, err: int, detail: str = "") -> NoRouteError:
    why = f"{os.strerror(err)} ({error_name(err)})"
    return NoRouteError(err, f"no route to {dst}: {why}{detail}")


@dataclass(frozen=True)
class Message:
    type: int
    flags: int
    seq: int
    pid: int
    payload: bytes


# ------------------------------------------------------------------ building
def align4(n: int) -> int:
    return (n + 3) & ~3


def pack_attr(attr_type: int, value: bytes) -> bytes:
    length = _RTATTR.size + len(value)
    return _RTATTR.pack(length, attr_type) + value + b"\0" * (align4(length) - length)


def pack_message(msg_type: int, flags: int, seq: int, payload: bytes, pid: int = 0) -> bytes:
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), msg_type, flags, seq, pid) + payload


def build_route_get(
    dst: IPAddress, seq: int, *, oif: int | None = None, mark: int | None = None
) -> bytes:
    """RTM_GETROUTE for one destination, like ``ip route get <dst> [oif ..] [mark ..]``."""
    family = _AF_BY_VERSION[dst.version]
    header = _RTMSG.pack(family, dst.max_prefixlen, 0, 0, 0, 0, 0, 0, RTM_F_LOOKUP_TABLE)
    attrs = pack_attr(RTA_DST, dst.packed)
    if oif is not None:
        attrs += pack_attr(RTA_OIF, _U32.pack(oif))
    if mark is not None:
        attrs += pack_attr(RTA_MARK, _U32.pack(mark))
    return pack_message(RTM_GETROUTE, NLM_F_REQUEST, seq, header + attrs)


def build_addr_dump(seq: int, family: int | None = None) -> bytes:
    af = AF_UNSPEC if family is None else _AF_BY_VERSION[family]
    return pack_message(
        RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, _IFADDRMSG.pack(af, 0, 0, 0, 0)
    )


def build_link_request(seq: int, index: int | None = None) -> bytes:
    """A dump of all links, or (with ``index``) a request for one link."""
    header = _IFINFOMSG.pack(AF_UNSPEC, 0, index or 0, 0, 0)
    attrs = pack_attr(IFLA_EXT_MASK, _U32.pack(RTEXT_FILTER_SKIP_STATS))
    flags = NLM_F_REQUEST if index is not None else NLM_F_REQUEST | NLM_F_DUMP
    return pack_message(RTM_GETLINK, flags, seq, header + attrs)


# ------------------------------------------------------------------ parsing
def parse_messages(data: bytes) -> list[Message]:
    """Split one datagram into netlink messages (each 4-byte aligned)."""
    messages, offset = [], 0
    while offset + _NLMSGHDR.size <= len(data):
        length, msg_type, flags, seq, pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            raise MalformedMessageError(f"bad nlmsg_len {length} at offset {offset}")
        payload = data[offset + _NLMSGHDR.size : offset + length]
        messages.append(Message(msg_type, flags, seq, pid, payload))
        offset += align4(length)
    return messages


def parse_attrs(data: bytes, offset: int = 0) -> dict[int, bytes]:
    """Attributes from ``offset`` on; a repeated type keeps its last value."""
    attrs: dict[int, bytes] = {}
    while offset + _RTATTR.size <= len(data):
        length, attr_type = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > len(data):
            raise MalformedMessageError(f"bad rta_len {length} at offset {offset}")
        attrs[attr_type & NLA_TYPE_MASK] = data[offset + _RTATTR.size : offset + length]
        offset += align4(length)
    return attrs


def parse_error(msg: Message) -> tuple[int, str | None]:
    """(positive errno or 0 for an ACK, extended-ACK text) of an NLMSG_ERROR or NLMSG_DONE."""
    if len(msg.payload) < _I32.size:
        return 0, None
    err = -_I32.unpack_from(msg.payload)[0]
    if msg.type != NLMSG_ERROR or not msg.flags & NLM_F_ACK_TLVS:
        return err, None
    offset = _I32.size + _NLMSGHDR.size
    if not msg.flags & NLM_F_CAPPED and len(msg.payload) >= offset:
        offset = _I32.size + align4(_NLMSGHDR.unpack_from(msg.payload, _I32.size)[0])
    text = parse_attrs(msg.payload, offset).get(NLMSGERR_ATTR_MSG)
    return err, _cstring(text) if text else None


def parse_route(payload: bytes) -> Route:
    if len(payload) < _RTMSG.size:
        raise MalformedMessageError("short rtmsg")
    af, dst_len, _, _, table, proto, scope, rtype, _ = _RTMSG.unpack_from(payload)
    attrs = parse_attrs(payload, _RTMSG.size)
    version = _version(af)
    zero = IPv4Address(0) if version == 4 else IPv6Address(0)
    dst = _ip(attrs[RTA_DST]) if RTA_DST in attrs else zero
    return Route(
        family=version,
        dst=ip_network(f"{dst}/{dst_len}", strict=False),
        type=ROUTE_TYPES[rtype] if rtype < len(ROUTE_TYPES) else str(rtype),
        table=_u32(attrs[RTA_TABLE]) if RTA_TABLE in attrs else table,
        protocol=proto,
        scope=scope,
        oif=_u32(attrs[RTA_OIF]) if RTA_OIF in attrs else None,
        ifname=None,
        gateway=_gateway(attrs),
        prefsrc=_ip(attrs[RTA_PREFSRC]) if RTA_PREFSRC in attrs else None,
        priority=_u32(attrs[RTA_PRIORITY]) if RTA_PRIORITY in attrs else None,
    )


def parse_address(payload: bytes) -> Address:
    if len(payload) < _IFADDRMSG.size:
        raise MalformedMessageError("short ifaddrmsg")
    af, prefixlen, flags8, scope, index = _IFADDRMSG.unpack_from(payload)
    attrs = parse_attrs(payload, _IFADDRMSG.size)
    local, remote = attrs.get(IFA_LOCAL), attrs.get(IFA_ADDRESS)
    raw = local or remote
    if raw is None:
        raise MalformedMessageError("address message without IFA_LOCAL or IFA_ADDRESS")
    peer = _ip(remote) if local and remote and remote != local else None
    flags = _u32(attrs[IFA_FLAGS]) if IFA_FLAGS in attrs else flags8
    label = _cstring(attrs[IFA_LABEL]) if IFA_LABEL in attrs else None
    preferred, valid = _lifetimes(attrs.get(IFA_CACHEINFO))
    return Address(
        family=_version(af),
        ifindex=index,
        ifname=label.split(":", 1)[0] if label else None,
        address=ip_interface(f"{_ip(raw)}/{prefixlen}"),
        peer=peer,
        scope=scope,
        label=label,
        flags=address_flag_names(flags | flags8, _version(af)),
        valid_lft=valid,
        preferred_lft=preferred,
    )


def parse_link(payload: bytes) -> Link:
    if len(payload) < _IFINFOMSG.size:
        raise MalformedMessageError("short ifinfomsg")
    _, _, index, flags, _ = _IFINFOMSG.unpack_from(payload)
    attrs = parse_attrs(payload, _IFINFOMSG.size)
    state = attrs[IFLA_OPERSTATE][0] if IFLA_OPERSTATE in attrs else 0
    kind = parse_attrs(attrs[IFLA_LINKINFO]).get(IFLA_INFO_KIND) if IFLA_LINKINFO in attrs else None
    return Link(
        index=index,
        name=_cstring(attrs.get(IFLA_IFNAME, b"")),
        flags=frozenset(name for bit, name in LINK_FLAGS.items() if flags & bit),
        kind=_cstring(kind) if kind else None,
        operstate=OPERSTATES[state] if state < len(OPERSTATES) else str(state),
        mtu=_u32(attrs[IFLA_MTU]) if IFLA_MTU in attrs else None,
        master=_u32(attrs[IFLA_MASTER]) if IFLA_MASTER in attrs else None,
        mac=attrs.get(IFLA_ADDRESS) or None,
    )


def parse_change(msg: Message) -> Change | None:
    """A notification as a Change; None for message types a monitor does not report."""
    if msg.type in (RTM_NEWLINK, RTM_DELLINK):
        return Change("link", msg.type == RTM_DELLINK, link=parse_link(msg.payload))
    if msg.type in (RTM_NEWADDR, RTM_DELADDR):
        return Change("address", msg.type == RTM_DELADDR, address=parse_address(msg.payload))
    if msg.type in (RTM_NEWROUTE, RTM_DELROUTE) and _route_family_known(msg.payload):
        return Change("route", msg.type == RTM_DELROUTE, route=parse_route(msg.payload))
    return None


def address_flag_names(flags: int, version: int) -> frozenset[str]:
    names = {name for bit, name in ADDRESS_FLAGS.items() if flags & bit}
    if flags & 0x01:
        names.add("secondary" if version == 4 else "temporary")
    return frozenset(names)


# ------------------------------------------------------------------ helpers
def _route_family_known(payload: bytes) -> bool:
    # Route notifications also cover multicast (RTNL_FAMILY_IPMR) tables; skip those.
    return bool(payload) and payload[0] in _VERSION_BY_AF


def _version(af: int) -> int:
    if af not in _VERSION_BY_AF:
        raise MalformedMessageError(f"unexpected address family {af}")
    return _VERSION_BY_AF[af]


def _ip(raw: bytes) -> IPAddress:
    if len(raw) not in (4, 16):
        raise MalformedMessageError(f"address of {len(raw)} bytes")
    return ip_address(raw)


def _gateway(attrs: dict[int, bytes]) -> IPAddress | None:
    if RTA_GATEWAY in attrs:
        return _ip(attrs[RTA_GATEWAY])
    via = attrs.get(RTA_VIA)  # struct rtvia: u16 family + address (IPv4 route, IPv6 next hop)
    return _ip(via[2:]) if via and len(via) > 2 else None


def _lifetimes(raw: bytes | None) -> tuple[int | None, int | None]:
    if raw is None or len(raw) < _CACHEINFO.size:
        return None, None
    preferred, valid, _, _ = _CACHEINFO.unpack_from(raw)
    return _life(preferred), _life(valid)


def _life(seconds: int) -> int | None:
    return None if seconds == INFINITY_LIFE_TIME else seconds


def _u32(raw: bytes) -> int:
    return int(_U32.unpack_from(raw)[0])


def _cstring(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
