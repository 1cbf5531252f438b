"""Which Service holds which LoadBalancer address: the in-memory ledger of the allocator.

Pure, no I/O. It is rebuilt from the Services' status at start (`allocator.build_ledger`),
never persisted. Held addresses of each family are also kept in one sorted list, so the used
count of a range is two bisections, and the first free address of a range is found by
bisection as well, jumping over a run of held addresses in one step (a /64 pool is never
enumerated, and a pool filled from its start costs O(log n) per allocation, not O(n)).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from local_ccm.lbipam.core.pools import (
    AddressRange,
    IPAddress,
    address_key,
    is_buggy,
    to_address,
)
from local_ccm.lbipam.core.service import Port
from local_ccm.records import dataclass

Key = tuple[int, int]  # (family, integer address)


@dataclass(frozen=True)
class Holder:
    """One Service on one address. `group` names who may share with it: `key:<sharing key>`,
    `pool:<pool>` for a pool that allows sharing without a key, or None (shares with nobody)."""

    service: str
    group: str | None
    ports: frozenset[Port]


def clash(holder: Holder, others: Iterable[Holder]) -> str | None:
    """Why `holder` cannot join the other holders of an address: "AddressInUse" (no common
    sharing group) or "SharingPortClash" (a common (protocol, port), or a Service without
    ports, which kube-vip also counts as using the whole address); None when it can."""
    for other in others:
        if other.service == holder.service:
            continue
        if holder.group is None or other.group != holder.group:
            return "AddressInUse"
        if not holder.ports or not other.ports or holder.ports & other.ports:
            return "SharingPortClash"  # a Service without ports takes the whole address
    return None


class Ledger:
    """Address → holders, and the reverse index Service → addresses."""

    def __init__(self) -> None:
        self._holders: dict[Key, dict[str, Holder]] = {}
        self._sorted: dict[int, list[int]] = {4: [], 6: []}
        self._services: dict[str, tuple[Key, ...]] = {}
        self._groups: dict[str, set[Key]] = {}

    # ------------------------------------------------------------ queries

    def holders(self, address: IPAddress) -> list[Holder]:
        return list(self._holders.get(address_key(address), {}).values())

    def held_by(self, service: str) -> tuple[IPAddress, ...]:
        return tuple(to_address(*key) for key in self._services.get(service, ()))

    def entries(self, service: str) -> list[tuple[IPAddress, Holder]]:
        """What `service` holds, as `hold` takes it (for `restore`)."""
        return [(to_address(*key), self._holders[key][service])
                for key in self._services.get(service, ())]  # fmt: skip

    def restore(self, service: str, entries: list[tuple[IPAddress, Holder]]) -> None:
        """`service` holds `entries` again (from `entries`), whatever it held since."""
        self.release(service)
        self.hold(entries)

    def services(self) -> list[str]:
        return sorted(self._services)

    def group_addresses(self, group: str, version: int) -> list[IPAddress]:
        """Addresses some holder of `group` is on, ascending."""
        keys = sorted(k for k in self._groups.get(group, ()) if k[0] == version)
        return [to_address(*k) for k in keys]

    def used_in(self, span: AddressRange, *, avoid_buggy: bool = False) -> int:
        """Held addresses of `span`; with `avoid_buggy` the held IPv4 .0 and .255 ones (held
        through another pool, or from before the setting) are not counted."""
        held = self._sorted[span.version]
        low, high = bisect.bisect_left(held, span.first), bisect.bisect_right(held, span.last)
        if avoid_buggy and span.version == 4:
            return sum(1 for value in held[low:high] if not is_buggy(4, value))
        return high - low

    def free_in(self, span: AddressRange) -> int:
        return span.size - self.used_in(span)

    def first_free(
        self, span: AddressRange, *, descending: bool = False, avoid_buggy: bool = False
    ) -> IPAddress | None:
        """`_first_free`, passing over IPv4 .0 and .255 addresses with `avoid_buggy`: each
        step past one either returns or jumps a run of held addresses, so a full /16 takes
        one step per /24, never one per address."""
        while span.first <= span.last:
            found = self._first_free(span, descending)
            if found is None or not (avoid_buggy and is_buggy(*address_key(found))):
                return found
            value = int(found)
            step = 2 if value % 256 == (0 if descending else 255) else 1  # .255 and .0 adjoin
            first, last = (span.first, value - step) if descending else (value + step, span.last)
            span = AddressRange(span.version, first, last)
        return None

    def _first_free(self, span: AddressRange, descending: bool) -> IPAddress | None:
        """The lowest (or highest) address of `span` nobody holds: O(log n), since a run of
        consecutive held addresses is found by bisection too (see `_run_end`)."""
        if not self.free_in(span):
            return None
        held = self._sorted[span.version]
        if descending:
            index = bisect.bisect_right(held, span.last) - 1
            if index < 0 or held[index] != span.last:
                return to_address(span.version, span.last)
            return to_address(span.version, held[_run_start(held, index)] - 1)
        index = bisect.bisect_left(held, span.first)
        if index == len(held) or held[index] != span.first:
            return to_address(span.version, span.first)
        return to_address(span.version, held[_run_end(held, index)] + 1)

    # ------------------------------------------------------------ changes

    def hold(self, holders: list[tuple[IPAddress, Holder]]) -> None:
        """Record what one Service holds, replacing what it held before."""
        services = {holder.service for _, holder in holders}
        for service in services:
            self.release(service)
        for address, holder in holders:
            key = address_key(address)
            on_address = self._holders.setdefault(key, {})
            if holder.service in on_address:
                continue  # the same address listed twice
            if not on_address:
                bisect.insort(self._sorted[key[0]], key[1])
            on_address[holder.service] = holder
            self._services[holder.service] = (*self._services.get(holder.service, ()), key)
            if holder.group is not None:
                self._groups.setdefault(holder.group, set()).add(key)

    def release(self, service: str) -> tuple[IPAddress, ...]:
        """Forget a Service; returns the addresses it held."""
        keys = self._services.pop(service, ())
        for key in keys:
            on_address = self._holders[key]
            holder = on_address.pop(service)
            if holder.group is not None and not any(
                h.group == holder.group for h in on_address.values()
            ):
                self._discard_group(holder.group, key)
            if not on_address:
                del self._holders[key]
                held = self._sorted[key[0]]
                del held[bisect.bisect_left(held, key[1])]
        return tuple(to_address(*key) for key in keys)

    def _discard_group(self, group: str, key: Key) -> None:
        members = self._groups[group]
        members.discard(key)
        if not members:
            del self._groups[group]


# In a sorted list of distinct integers, held[k] - k never decreases, and it is constant exactly
# along a run of consecutive values: the ends of the run through `index` are two bisections.


def _run_end(held: list[int], index: int) -> int:
    """The last index of the run of consecutive values through `index`."""
    offset, low, high = held[index] - index, index, len(held)
    while low < high:
        middle = (low + high) // 2
        if held[middle] - middle <= offset:
            low = middle + 1
        else:
            high = middle
    return low - 1


def _run_start(held: list[int], index: int) -> int:
    """The first index of the run of consecutive values through `index`."""
    offset, low, high = held[index] - index, 0, index + 1
    while low < high:
        middle = (low + high) // 2
        if held[middle] - middle < offset:
            low = middle + 1
        else:
            high = middle
    return low
