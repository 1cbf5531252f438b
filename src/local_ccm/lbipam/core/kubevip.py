"""kube-vip-cloud-provider's `kube-system/kubevip` ConfigMap read as pools.

Pure, no I/O. Keys (see kube-vip's cloud-provider documentation): `cidr-<namespace>`,
`range-<namespace>`, `cidr-global`, `range-global` (comma lists), `allow-share-<namespace>`,
`allow-share-global`, `search-order` (`desc`) and `skip-end-ips-in-cidr`. Other keys (e.g.
`interface-*`) are ignored. A namespace's pool serves only that namespace and, as in kube-vip,
that namespace no longer takes from the global pool.
"""

from __future__ import annotations

from collections.abc import Mapping

from local_ccm.lbipam.core.pools import AddressRange, Pool, merge, parse_address_text
from local_ccm.records import dataclass

GLOBAL = "global"
POOL_PREFIX = "kubevip-"


@dataclass(frozen=True)
class KubeVipPools:
    pools: tuple[Pool, ...]
    problems: tuple[str, ...]  # "<key>: <what is wrong>"


def _boolean(data: Mapping[str, str], key: str, problems: list[str]) -> bool:
    value = data.get(key)
    if value is None:
        return False
    if value.strip().lower() not in ("true", "false"):
        problems.append(f"{key}: {value!r} is not true or false")
        return False
    return value.strip().lower() == "true"


def _scopes(data: Mapping[str, str]) -> set[str]:
    return {
        key.removeprefix(prefix)
        for key in data
        for prefix in ("cidr-", "range-")
        if key.startswith(prefix)
    }


def _ranges(
    data: Mapping[str, str], scope: str, skip_ends: bool, problems: list[str]
) -> list[AddressRange]:
    found: list[AddressRange] = []
    for kind in ("cidr", "range"):
        key = f"{kind}-{scope}"
        for text in filter(None, (t.strip() for t in data.get(key, "").split(","))):
            if (kind == "cidr") == ("-" in text):
                problems.append(f"{key}: {text!r} is not a {'CIDR' if kind == 'cidr' else 'range'}")
                continue
            parsed = parse_address_text(text, allow_first_last=not skip_ends)
            if isinstance(parsed, str):
                problems.append(f"{key}: {parsed}")
            else:
                found.append(parsed)
    return found


def parse_kubevip(data: Mapping[str, str]) -> KubeVipPools:
    """Pools named `kubevip-<namespace>` and `kubevip-global`, each cidr and range of a scope
    merged into one pool; every bad value listed by key."""
    problems: list[str] = []
    order = data.get("search-order", "").strip().lower()
    if order not in ("", "asc", "desc"):
        problems.append(f"search-order: {order!r} is not asc or desc")
    skip_ends = _boolean(data, "skip-end-ips-in-cidr", problems)
    scopes = _scopes(data)
    namespaces = frozenset(scopes - {GLOBAL})
    global_share = data.get("allow-share-global", "").strip().lower() == "true"
    pools = []
    for scope in sorted(scopes):
        ranges = _ranges(data, scope, skip_ends, problems)
        share = _boolean(data, f"allow-share-{scope}", problems)
        if f"allow-share-{scope}" not in data:
            share = global_share  # kube-vip falls back to allow-share-global
        if not ranges:
            continue
        own = scope != GLOBAL
        pools.append(
            Pool(
                POOL_PREFIX + scope,
                merge(ranges),
                namespaces=frozenset({scope}) if own else None,
                excluded_namespaces=frozenset() if own else namespaces,
                allow_share=share,
                descending=order == "desc",
            )
        )
    _stray_shares(data, scopes, problems)
    return KubeVipPools(tuple(pools), tuple(problems))


def _stray_shares(data: Mapping[str, str], scopes: set[str], problems: list[str]) -> None:
    # allow-share for a scope without addresses still has its value checked.
    for key in sorted(data):
        if key.startswith("allow-share-") and key.removeprefix("allow-share-") not in scopes:
            _boolean(data, key, problems)
