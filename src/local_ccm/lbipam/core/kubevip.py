"""kube-vip-cloud-provider's `kube-system/kubevip` ConfigMap read as pools, as
kube-vip-cloud-provider reads it (kube-vip/kube-vip-cloud-provider: pkg/provider/loadBalancer.go
`discoverPool` and `discoverVIPs`, pkg/config/config.go, pkg/ipam).

Pure, no I/O. The keys:

- `cidr-<namespace>`, `cidr-global`, `range-<namespace>`, `range-global`: a namespace takes the
  first key present of `cidr-<namespace>`, `cidr-global`, `range-<namespace>`, `range-global`.
  A value holding a `/` is a comma list of CIDRs, any other a comma list of `first-last`
  ranges, whatever the key says. A CIDR's host bits are masked (`192.168.0.210/29` is
  `.208`-`.215`). IPv4 addresses ending in .0 or .255 are never handed out.
- `skip-end-ips-in-cidr`: exactly `true` takes the first and last address off each prefix of
  an IPv4 CIDR value once its CIDRs are merged (a /31 or /32 keeps both; IPv6 and ranges are
  never trimmed).
- `search-order`: exactly `desc` allocates from the end.
- `allow-share-<namespace>`, else `allow-share-global` (Go's `strconv.ParseBool`; anything
  else is false): Services of the namespace share an IPv4 address when their port numbers
  differ. IPv6 addresses are never shared.

Other keys (`interface-*`, …) are ignored. Every value that kube-vip-cloud-provider would not
use as written is a problem ("<key>: <what>"), logged; the rest of the ConfigMap applies.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from local_ccm.lbipam.core.pools import (
    AddressRange,
    Pool,
    merge,
    parse_address_text,
    unusable,
)
from local_ccm.records import dataclass

GLOBAL = "global"
POOL_PREFIX = "kubevip-"
DHCP = "0.0.0.0/32"  # kube-vip's request for an address by DHCP, done by kube-vip itself
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass(frozen=True)
class KubeVipPools:
    pools: tuple[Pool, ...]
    problems: tuple[str, ...]  # "<key>: <what is wrong>"


@dataclass(frozen=True)
class _Settings:
    descending: bool
    skip_ends: bool
    shares: Mapping[str, bool]  # scope -> allow-share-<scope>


def parse_kubevip(data: Mapping[str, str]) -> KubeVipPools:
    """Pool `kubevip-<namespace>` for each namespace served by a key of its own, and
    `kubevip-global` for every other namespace; every unusable value listed by key."""
    problems: list[str] = []
    settings = _settings(data, problems)
    own = _own_keys(data)
    global_key = next((k for k in ("cidr-global", "range-global") if k in data), None)
    _note_unread(data, own, global_key, problems)
    pools = []
    for scope, key in sorted({**own, **({GLOBAL: global_key} if global_key else {})}.items()):
        ranges = _read_value(key, data[key], settings.skip_ends, problems)
        if ranges:
            pools.append(_pool(scope, ranges, settings, frozenset(own)))
    return KubeVipPools(tuple(pools), tuple(problems))


def _settings(data: Mapping[str, str], problems: list[str]) -> _Settings:
    order = data.get("search-order")
    if order is not None and order not in ("asc", "desc"):
        problems.append(f"search-order: {order!r} is read as ascending: kube-vip-cloud-provider"
                        " allocates from the end only for the exact value desc")  # fmt: skip
    skip = data.get("skip-end-ips-in-cidr")
    if skip is not None and skip not in ("true", "false"):
        problems.append(f"skip-end-ips-in-cidr: {skip!r} is read as false: kube-vip-cloud-provider"
                        " skips a CIDR's ends only for the exact value true")  # fmt: skip
    shares = {
        key.removeprefix("allow-share-"): _go_bool(key, value, problems)
        for key, value in sorted(data.items())
        if key.startswith("allow-share-")
    }
    return _Settings(order == "desc", skip == "true", shares)


def _go_bool(key: str, value: str, problems: list[str]) -> bool:
    if value in _GO_TRUE:
        return True
    if value not in _GO_FALSE:
        problems.append(f"{key}: {value!r} is not a boolean (Go's strconv.ParseBool); read as"
                        " false, as kube-vip-cloud-provider does")  # fmt: skip
    return False


def _own_keys(data: Mapping[str, str]) -> dict[str, str]:
    """namespace -> the key that serves it, for namespaces not served by a global key:
    `cidr-<ns>`, or `range-<ns>` when there is no `cidr-global` (which comes before it)."""
    own = {}
    for key in data:
        kind, _, scope = key.partition("-")
        if kind in ("cidr", "range") and scope and scope != GLOBAL:
            if f"cidr-{scope}" in data:
                own[scope] = f"cidr-{scope}"
            elif "cidr-global" not in data:
                own[scope] = f"range-{scope}"
    return own


def _note_unread(
    data: Mapping[str, str], own: Mapping[str, str], global_key: str | None, problems: list[str]
) -> None:
    for key in sorted(data):
        kind, _, scope = key.partition("-")
        if kind not in ("cidr", "range") or not scope or key in (global_key, own.get(scope)):
            continue
        if scope == GLOBAL:
            problems.append(f"{key}: not read: cidr-global comes first, as in"
                            " kube-vip-cloud-provider")  # fmt: skip
        else:
            taken = own.get(scope, "cidr-global")
            problems.append(f"{key}: not read: namespace {scope} takes {taken}, which comes"
                            " first in kube-vip-cloud-provider")  # fmt: skip


def _pool(
    scope: str, ranges: tuple[AddressRange, ...], settings: _Settings, own: frozenset[str]
) -> Pool:
    default = settings.shares.get(GLOBAL, False)
    if scope != GLOBAL:
        return Pool(POOL_PREFIX + scope, ranges, namespaces=frozenset({scope}),
                    allow_share=settings.shares.get(scope, default),
                    descending=settings.descending, avoid_buggy_ips=True)  # fmt: skip
    reversed_share = frozenset(
        space for space, share in settings.shares.items()
        if space != GLOBAL and space not in own and share != default
    )  # fmt: skip
    return Pool(POOL_PREFIX + GLOBAL, ranges, excluded_namespaces=own, allow_share=default,
                allow_share_except=reversed_share, descending=settings.descending,
                avoid_buggy_ips=True)  # fmt: skip


# ---------------------------------------------------------------- one value


def _read_value(
    key: str, value: str, skip_ends: bool, problems: list[str]
) -> tuple[AddressRange, ...]:
    """The addresses of one value. Spaces and empty entries are tolerated, where
    kube-vip-cloud-provider fails the whole value; a bad entry is listed and left out."""
    if value.strip() == DHCP:
        problems.append(f"{key}: {DHCP} asks kube-vip for an address by DHCP, which"
                        " service-lb-ipam does not do: no address for this scope")  # fmt: skip
        return ()
    entries = [t.strip() for t in value.split(",") if t.strip()]
    if not entries:
        problems.append(f"{key}: no addresses: no address for this scope")
        return ()
    found: list[AddressRange] = []
    for text in entries:
        parsed = _cidr(text) if "/" in value else _range(text)
        if isinstance(parsed, str):
            problems.append(f"{key}: {parsed}")
        else:
            found.append(parsed)
    merged = merge(found)
    if skip_ends and "/" in value:
        return merge(piece for span in merged for piece in _trimmed(span))
    return merged


def _cidr(text: str) -> AddressRange | str:
    _, slash, bits = text.partition("/")
    if not slash:
        return (f"{text!r} is not a CIDR (a value holding a '/' is a list of CIDRs only, as"
                " kube-vip-cloud-provider reads it)")  # fmt: skip
    if not (bits.isascii() and bits.isdigit()):
        return f"{text!r} is not a CIDR: the prefix length must be a number"
    try:
        network = ipaddress.ip_network(text, strict=False)  # host bits masked, as netip does
    except ValueError as error:
        return f"{text!r} is not a CIDR: {error}"
    span = AddressRange(
        network.version, int(network.network_address), int(network.broadcast_address)
    )
    return unusable(text, span) or span


def _range(text: str) -> AddressRange | str:
    if text.count("-") != 1:
        return (f"{text!r} is not a range first-last (a value without a '/' is a list of"
                " ranges only, as kube-vip-cloud-provider reads it)")  # fmt: skip
    return parse_address_text(text, allow_first_last=True)


def _trimmed(span: AddressRange) -> list[AddressRange]:
    """skip-end-ips-in-cidr: each prefix of the merged IPv4 set (the fewest prefixes that
    cover it, as netipx's `IPSet.Prefixes`) loses its first and last address; a /31 or /32
    keeps both (RFC 3021); IPv6 keeps all."""
    if span.version != 4:
        return [span]
    first, last = ipaddress.IPv4Address(span.first), ipaddress.IPv4Address(span.last)
    pieces = []
    for net in ipaddress.summarize_address_range(first, last):
        low, high = int(net.network_address), int(net.broadcast_address)
        if net.prefixlen < 31:
            low, high = low + 1, high - 1
        pieces.append(AddressRange(4, low, high))
    return pieces
