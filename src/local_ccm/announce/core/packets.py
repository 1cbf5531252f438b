"""ARP and NDP frames on Ethernet, byte-exact: the requests the announcer answers and the
frames it sends. Pure, no I/O, standard library only.

Addresses are bytes, never objects: a MAC is 6 bytes, an IPv4 address 4, an IPv6 address 16
(``packed``), so a frame is checked against a set of packed addresses without building anything.
Only untagged Ethernet II frames are read. An 802.1Q or 802.1ad tagged frame is dropped: a VLAN
is an interface of its own (``eth0.100``), on which the kernel hands frames over untagged, and
the agent answers on the interface of the pool's segment. The parsers never raise: they return
None on anything else, and `drop_reason` says why (for logs and counters, off the hot path).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Container
from typing import Final

from local_ccm.records import dataclass

ETH_P_ARP: Final = 0x0806
ETH_P_IPV6: Final = 0x86DD
BROADCAST: Final = b"\xff" * 6
ZERO_MAC: Final = bytes(6)
UNSPECIFIED: Final = bytes(16)  # ::, the source of a DAD solicitation (RFC 4862 5.4.2)
ALL_NODES: Final = ipaddress.IPv6Address("ff02::1").packed
ALL_NODES_MAC: Final = b"\x33\x33\x00\x00\x00\x01"  # RFC 2464 7: 33:33 + the low 32 bits
MIN_FRAME: Final = 60  # the 64-byte Ethernet minimum less the FCS the NIC appends
HOP_LIMIT: Final = 255  # RFC 4861 7.1.1: anything less crossed a router
ICMPV6: Final = 58
NS: Final = 135
NA: Final = 136

_ARP_TYPE = b"\x08\x06"
_IPV6_TYPE = b"\x86\xdd"
_TAGGED = frozenset({b"\x81\x00", b"\x88\xa8", b"\x91\x00"})  # 802.1Q, 802.1ad, old QinQ
_ARP_IPV4_ETHERNET = b"\x00\x01\x08\x00\x06\x04"  # htype 1, ptype IPv4, hlen 6, plen 4
# dst, src, ethertype, then the ARP body after its fixed header: oper, sha, spa, tha, tpa.
_ARP = struct.Struct("!6s6s2s6sH6s4s6s4s")
_IPV6 = struct.Struct("!IHBB16s16s")  # version/class/flow, payload length, next header, hops
_SOLICITED_PREFIX = ipaddress.IPv6Address("ff02::1:ff00:0").packed[:13]  # RFC 4291 2.7.1
_NA = struct.Struct("!BBHI16sBB6s")  # type, code, checksum, flags, target, TLLA option
_FLAG_SOLICITED = 0x40000000  # RFC 4861 4.4: R 0x80000000 (never set here), S, O
_FLAG_OVERRIDE = 0x20000000


@dataclass(frozen=True)
class Link:
    """The interface the agent answers on: its MAC and its IPv6 link-local address (the source
    of every advertisement, RFC 4861 7.2.4), both packed."""

    mac: bytes
    link_local: bytes


@dataclass(frozen=True)
class ArpRequest:
    """An ARP request (RFC 826, oper 1) for IPv4 over Ethernet: who asks and for what."""

    eth_dst: bytes
    sha: bytes  # the asker's MAC, where the reply goes
    spa: bytes  # the asker's address; 0.0.0.0 in an RFC 5227 probe
    tpa: bytes  # the address asked for

    @property
    def probe(self) -> bool:
        """An RFC 5227 probe: someone checks that the address is free before using it."""
        return self.spa == b"\x00\x00\x00\x00"

    @property
    def announcement(self) -> bool:
        """A gratuitous request (spa = tpa): its sender claims the address for itself."""
        return self.spa == self.tpa


@dataclass(frozen=True)
class Solicitation:
    """A valid Neighbor Solicitation (RFC 4861 4.3, checked as 7.1.1 says)."""

    eth_src: bytes
    eth_dst: bytes
    src: bytes  # :: in a DAD solicitation
    dst: bytes  # the target's solicited-node group, or the target itself (unreachability probe)
    target: bytes
    source_lla: bytes | None  # the Source Link-Layer Address option, when present

    @property
    def dad(self) -> bool:
        """Duplicate Address Detection (RFC 4862 5.4.2): the answer goes to all nodes."""
        return self.src == UNSPECIFIED


# ------------------------------------------------------------------ parsing


def parse_arp_request(frame: bytes) -> ArpRequest | None:
    """The ARP request in `frame`, or None for anything else (`drop_reason` says why)."""
    parsed = _arp_request(frame)
    return parsed if isinstance(parsed, ArpRequest) else None


def parse_solicitation(frame: bytes) -> Solicitation | None:
    """The Neighbor Solicitation in `frame`, or None (`drop_reason` says why)."""
    parsed = _solicitation(frame)
    return parsed if isinstance(parsed, Solicitation) else None


def drop_reason(frame: bytes) -> str:
    """Why neither parser accepts `frame`; "" when one does."""
    ethertype = frame[12:14]
    parsed = _solicitation(frame) if ethertype == _IPV6_TYPE else _arp_request(frame)
    return parsed if isinstance(parsed, str) else ""


def _ethernet(frame: bytes, ethertype: bytes, name: str) -> str:
    if len(frame) < 14:
        return "truncated Ethernet header"
    if frame[12:14] in _TAGGED:
        return "VLAN-tagged frame"
    if frame[12:14] != ethertype:
        return f"ethertype 0x{frame[12:14].hex()} is not {name}"
    if frame[6] & 1:
        return "Ethernet source is a group address"
    return ""


def _arp_request(frame: bytes) -> ArpRequest | str:
    if reason := _ethernet(frame, _ARP_TYPE, "ARP"):
        return reason
    if len(frame) < _ARP.size:
        return "truncated ARP packet"
    dst, _, _, fixed, oper, sha, spa, _, tpa = _ARP.unpack_from(frame)
    if fixed != _ARP_IPV4_ETHERNET:
        return "not ARP for IPv4 over Ethernet"
    if oper != 1:
        return f"ARP operation {oper} is not a request"
    if sha[0] & 1:
        return "ARP sender hardware address is a group address"
    return ArpRequest(eth_dst=dst, sha=sha, spa=spa, tpa=tpa)


def _solicitation(frame: bytes) -> Solicitation | str:
    packet = _icmpv6(frame)
    if isinstance(packet, str):
        return packet
    hops, src, dst, icmp = packet
    if reason := _ns_header(hops, icmp) or _ns_addresses(src, dst, icmp):
        return reason
    lla = _source_lla(icmp)
    if isinstance(lla, str):
        return lla
    if src == UNSPECIFIED and (dst[:13] != _SOLICITED_PREFIX or lla is not None):
        return "DAD solicitation not to a solicited-node group or with a source address option"
    return Solicitation(frame[6:12], frame[:6], src, dst, icmp[8:24], lla)


def _icmpv6(frame: bytes) -> tuple[int, bytes, bytes, bytes] | str:
    """Hop limit, source, destination and ICMPv6 message of an IPv6 frame, or why not."""
    if reason := _ethernet(frame, _IPV6_TYPE, "IPv6"):
        return reason
    if len(frame) < 14 + _IPV6.size:
        return "truncated IPv6 header"
    first, length, next_header, hops, src, dst = _IPV6.unpack_from(frame, 14)
    if first >> 28 != 6:
        return "IP version is not 6"
    if len(frame) < 54 + length:
        return "truncated IPv6 payload"
    if next_header != ICMPV6:
        # ND messages carry no extension headers in practice; one here is not ND to answer.
        return f"next header {next_header} is not ICMPv6"
    return hops, src, dst, frame[54 : 54 + length]


def _ns_header(hops: int, icmp: bytes) -> str:
    """RFC 4861 7.1.1's checks of a solicitation's type, code, length and hop limit."""
    if len(icmp) < 4 or icmp[0] != NS:
        return "not a neighbour solicitation"
    if hops != HOP_LIMIT:
        return f"hop limit {hops} is not 255"
    if icmp[1] != 0:
        return f"ICMPv6 code {icmp[1]} is not 0"
    if len(icmp) < 24:
        return "neighbour solicitation shorter than 24 bytes"
    return ""


def _ns_addresses(src: bytes, dst: bytes, icmp: bytes) -> str:
    """The checksum, and no multicast target or source."""
    if _sum(src, dst, icmp) != 0:
        return "bad ICMPv6 checksum"
    if icmp[8] == 0xFF:
        return "target is a multicast address"
    if src[0] == 0xFF:
        return "source is a multicast address"
    return ""


def _source_lla(icmp: bytes) -> bytes | str | None:
    """The Source Link-Layer Address option's MAC, None without one, or why the options are
    malformed (RFC 4861 7.1.1: every option's length is above zero)."""
    found: bytes | None = None
    at = 24
    while at < len(icmp):
        if at + 2 > len(icmp) or icmp[at + 1] == 0:
            return "malformed option"
        end = at + 8 * icmp[at + 1]
        if end > len(icmp):
            return "truncated option"
        if icmp[at] == 1:
            if icmp[at + 1] != 1:  # RFC 2464 8: one unit of 8 bytes on Ethernet
                return "source link-layer address option is not Ethernet's"
            found = icmp[at + 2 : at + 8]
            if found[0] & 1:  # a group MAC is no host's: refused as the ARP sender's is
                return "source link-layer address is a group address"
        at = end
    return found


def _sum(src: bytes, dst: bytes, icmp: bytes) -> int:
    """The ones'-complement sum of the ICMPv6 pseudo-header (RFC 8200 8.1) and `icmp`, modulo
    0xffff: 0 when a checksum in `icmp` is right. Summing 16-bit words modulo 0xffff is taking
    the whole as one big-endian number modulo 0xffff, since 0x10000 is 1 modulo 0xffff."""
    pad = b"\x00" if len(icmp) % 2 else b""
    whole = src + dst + len(icmp).to_bytes(4, "big") + b"\x00\x00\x00\x3a" + icmp + pad
    return int.from_bytes(whole, "big") % 0xFFFF


# ------------------------------------------------------------------ building


def arp_reply(request: ArpRequest, mac: bytes) -> bytes:
    """The reply to `request` (RFC 826): ``tpa is-at mac``, unicast to the asker. A probe's
    reply keeps its target 0.0.0.0, as Linux answers probes."""
    return _arp_frame(request.sha, mac, 2, spa=request.tpa, tha=request.sha, tpa=request.spa)


def gratuitous_arp(address: bytes, mac: bytes) -> tuple[bytes, bytes]:
    """The two broadcast frames that move `address` to `mac` in every ARP cache: the request
    form (RFC 5227 2.3's announcement, target hardware address zero) and the reply form
    (RFC 5944 4.6, target hardware address `mac`). Receivers differ in which they honour;
    MetalLB sends both as well, kube-vip one at a time in turn."""
    return (
        _arp_frame(BROADCAST, mac, 1, spa=address, tha=ZERO_MAC, tpa=address),
        _arp_frame(BROADCAST, mac, 2, spa=address, tha=mac, tpa=address),
    )


def _arp_frame(dst: bytes, mac: bytes, oper: int, *, spa: bytes, tha: bytes, tpa: bytes) -> bytes:
    frame = _ARP.pack(dst, mac, _ARP_TYPE, _ARP_IPV4_ETHERNET, oper, mac, spa, tha, tpa)
    return frame + bytes(MIN_FRAME - len(frame))


def advertisement_for(solicitation: Solicitation, link: Link) -> bytes:
    """The Neighbor Advertisement answering `solicitation` (RFC 4861 7.2.4): to the solicitor
    with S set, or for DAD to all nodes without it. Its Ethernet destination is the Source
    Link-Layer Address option, else the frame's source (a unicast probe may omit the option;
    the frame came from that MAC)."""
    if solicitation.dad:
        return advertisement(link, solicitation.target, ALL_NODES, ALL_NODES_MAC, False)
    mac = solicitation.source_lla or solicitation.eth_src
    return advertisement(link, solicitation.target, solicitation.src, mac, True)


def unsolicited_advertisement(address: bytes, link: Link) -> bytes:
    """The advertisement sent on a takeover (RFC 4861 7.2.6): to all nodes, O set, S clear."""
    return advertisement(link, address, ALL_NODES, ALL_NODES_MAC, False)


def advertisement(link: Link, target: bytes, dst: bytes, dst_mac: bytes, solicited: bool) -> bytes:
    """A Neighbor Advertisement for `target` at ``link.mac``: R clear (not a router), O set (this
    Node is the address's owner, so caches take the new MAC), the Target Link-Layer Address
    option, hop limit 255, from the link-local address."""
    flags = _FLAG_OVERRIDE | (_FLAG_SOLICITED if solicited else 0)
    icmp = _NA.pack(NA, 0, 0, flags, target, 2, 1, link.mac)
    checksum = (0xFFFF - _sum(link.link_local, dst, icmp)) % 0xFFFF
    icmp = icmp[:2] + checksum.to_bytes(2, "big") + icmp[4:]
    header = _IPV6.pack(6 << 28, len(icmp), ICMPV6, HOP_LIMIT, link.link_local, dst)
    return dst_mac + link.mac + _IPV6_TYPE + header + icmp


def solicited_node(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv6Address, bytes]:
    """The solicited-node group of `address` (ff02::1:ffXX:XXXX, RFC 4291 2.7.1) and its
    Ethernet group MAC (33:33:ffXX:XXXX, RFC 2464 7): what the adapter joins to hear the
    solicitations for an address it announces."""
    group = _solicited(address.packed)
    return ipaddress.IPv6Address(group), b"\x33\x33" + group[12:]


def _solicited(packed: bytes) -> bytes:
    return _SOLICITED_PREFIX + packed[13:]


# ------------------------------------------------------------------ answering


def answer(frame: bytes, link: Link, owned: Container[bytes]) -> bytes | None:
    """The reply to `frame`, or None. `owned`: the packed addresses this Node answers for now
    (the adapter keeps it to what `hold.answering` allows).

    Answered: an ARP request for an owned address, broadcast or to this MAC (a unicast request
    refreshes a cache entry, RFC 1122 2.3.2.1), probes included; a solicitation for an owned
    target, to its solicited-node group or to the target itself, DAD included. Not answered:
    our own frames, ARP replies, frames to other hosts, and whatever the parsers drop."""
    if frame[6:12] == link.mac:
        return None
    ethertype = frame[12:14]
    if ethertype == _ARP_TYPE:
        return _answer_arp(frame, link, owned)
    if ethertype == _IPV6_TYPE:
        return _answer_solicitation(frame, link, owned)
    return None


def _answer_arp(frame: bytes, link: Link, owned: Container[bytes]) -> bytes | None:
    request = parse_arp_request(frame)
    if request is None or request.tpa not in owned:
        return None
    if request.eth_dst not in (BROADCAST, link.mac):
        return None
    return arp_reply(request, link.mac)


def _answer_solicitation(frame: bytes, link: Link, owned: Container[bytes]) -> bytes | None:
    solicitation = parse_solicitation(frame)
    if solicitation is None or solicitation.target not in owned:
        return None
    if solicitation.dst not in (solicitation.target, _solicited(solicitation.target)):
        return None
    if solicitation.eth_dst not in (link.mac, b"\x33\x33" + solicitation.dst[12:]):
        return None
    return advertisement_for(solicitation, link)
