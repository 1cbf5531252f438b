"""Compact CIDR sets for the node IPAM allocator.

Pure, no I/O.

`BlockSet` is the occupancy of one pool family: one bit per per-Node block, in leaf pages of
32,768 blocks that exist only once something in them is used, plus a summary bit per page that
says "full". Lowest-free is the first page whose summary bit is clear, then the first clear bit
in it. Memory is ⌈B/8⌉ bytes at most, and nothing for pages never touched.

`ReservationSet` holds every reserved CIDR of one family with the holders that reserve it, so a
block can be re-checked against everything else when one reservation goes away.
"""

from __future__ import annotations

import bisect
import ipaddress
import re

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Holder = tuple[str, str]
"""Who holds a reservation, e.g. ("node", uid); opaque to this module."""

PAGE_BLOCKS = 32768
"""Blocks per leaf page (4 KiB of bits)."""
IPV6_MAX_BLOCKS = 1 << 16
"""At most 2^16 IPv6 blocks per pool (kube-controller-manager's limit)."""
_NOT_FULL_BYTE = re.compile(rb"[^\xff]")


class BlockSet:
    """Used / free state of the blocks of one pool family. A set bit means "unavailable"."""

    def __init__(self, network: IPNetwork, block_prefix: int) -> None:
        width = network.max_prefixlen
        if not network.prefixlen <= block_prefix <= width:
            raise ValueError(
                f"block prefix /{block_prefix} does not fit in {network} (zero blocks)"
            )
        capacity = 1 << (block_prefix - network.prefixlen)
        if network.version == 6 and capacity > IPV6_MAX_BLOCKS:
            raise ValueError(
                f"{network} holds {capacity} blocks of /{block_prefix}; IPv6 max 65536"
            )
        self.network = network
        self.block_prefix = block_prefix
        self.capacity = capacity
        self.used = 0
        self._base = int(network.network_address)
        self._end = int(network.broadcast_address)
        self._host_bits = width - block_prefix
        self._page_count = -(-capacity // PAGE_BLOCKS)
        self._pages: dict[int, bytearray] = {}
        self._page_used: dict[int, int] = {}
        self._hints: dict[int, int] = {}  # page -> byte index before which the page is full
        self._full = 0  # bit p set: page p has no free block

    # ------------------------------------------------------------ arithmetic

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def block(self, index: int) -> IPNetwork:
        """Block `index` (0-based): pool base + index × 2^host_bits."""
        if not 0 <= index < self.capacity:
            raise IndexError(f"block {index} outside 0..{self.capacity - 1}")
        address = self._base + (index << self._host_bits)
        return ipaddress.ip_network((address, self.block_prefix))

    def index_range(self, cidr: IPNetwork) -> range:
        """Indices of the blocks `cidr` intersects (equal, containing or contained)."""
        if cidr.version != self.network.version:
            return range(0)
        # Integer arithmetic: `broadcast_address` builds an address object per CIDR.
        start = int(cidr.network_address)
        end = start + (1 << (cidr.max_prefixlen - cidr.prefixlen)) - 1
        if end < self._base or start > self._end:
            return range(0)
        first = (max(start, self._base) - self._base) >> self._host_bits
        last = (min(end, self._end) - self._base) >> self._host_bits
        return range(first, last + 1)

    # ------------------------------------------------------------ queries

    def lowest_free(self) -> int | None:
        """The lowest free block index, or None when every block is unavailable. Lowest-free,
        not upstream's next-fit: the answer depends only on occupancy, so a restarted or
        failed-over controller allocates exactly as an uninterrupted one."""
        not_full = ~self._full & (self._full + 1)  # lowest clear bit of the summary
        page_index = not_full.bit_length() - 1
        if page_index >= self._page_count:
            return None
        page = self._pages.get(page_index)
        if page is None:
            return page_index * PAGE_BLOCKS
        # The summary says this page has a clear bit, so the search finds one.
        found = _NOT_FULL_BYTE.search(page, self._hints.get(page_index, 0))
        assert found is not None
        byte_index = self._hints[page_index] = found.start()
        byte = page[byte_index]
        return page_index * PAGE_BLOCKS + byte_index * 8 + (~byte & (byte + 1)).bit_length() - 1

    # ------------------------------------------------------------ changes

    def allocate(self) -> IPNetwork | None:
        """Occupy and return the lowest free block, or None when exhausted."""
        index = self.lowest_free()
        if index is None:
            return None
        self.occupy(range(index, index + 1))
        return self.block(index)

    def occupy(self, indices: range) -> int:
        """Mark a contiguous range of blocks unavailable; returns how many were free before."""
        return self._apply(indices, used=True)

    def release(self, indices: range) -> int:
        """Mark a contiguous range of blocks free; returns how many were used before."""
        return self._apply(indices, used=False)

    def _apply(self, indices: range, *, used: bool) -> int:
        if indices.step != 1:
            raise ValueError("only contiguous ranges")
        start, stop = max(indices.start, 0), min(indices.stop, self.capacity)
        changed = 0
        while start < stop:
            page_index = start // PAGE_BLOCKS
            page_stop = min(stop, (page_index + 1) * PAGE_BLOCKS)
            changed += self._apply_page(page_index, start % PAGE_BLOCKS, page_stop - start, used)
            start = page_stop
        self.used += changed if used else -changed
        return changed

    def _apply_page(self, page_index: int, first: int, count: int, used: bool) -> int:
        page = self._pages.get(page_index)
        if page is None:
            if not used:
                return 0
            page = self._pages[page_index] = bytearray(self._page_bytes(page_index))
        lo, hi = first >> 3, (first + count + 7) >> 3
        before = int.from_bytes(page[lo:hi], "little")
        mask = ((1 << count) - 1) << (first - (lo << 3))
        after = before | mask if used else before & ~mask
        page[lo:hi] = after.to_bytes(hi - lo, "little")
        if not used:
            self._hints[page_index] = min(lo, self._hints.get(page_index, 0))
        changed = abs(after.bit_count() - before.bit_count())
        self._count_page(page_index, changed if used else -changed)
        return changed

    def _count_page(self, page_index: int, delta: int) -> None:
        count = self._page_used.get(page_index, 0) + delta
        if count == 0:
            # An empty page costs nothing again (memory proportional to the used part).
            self._pages.pop(page_index, None)
            self._page_used.pop(page_index, None)
            self._hints.pop(page_index, None)
        else:
            self._page_used[page_index] = count
        if count == self._page_blocks(page_index):
            self._full |= 1 << page_index
        else:
            self._full &= ~(1 << page_index)

    def _page_blocks(self, page_index: int) -> int:
        return min(PAGE_BLOCKS, self.capacity - page_index * PAGE_BLOCKS)

    def _page_bytes(self, page_index: int) -> int:
        return (self._page_blocks(page_index) + 7) // 8


# ---------------------------------------------------------------- reservations


class ReservationSet:
    """Reserved CIDRs of one family, each with the set of holders that reserve it.

    CIDRs are nested or disjoint, so the reservations intersecting a CIDR are those inside it
    (a range of the start-sorted index) plus its supernets (one lookup per prefix length in use):
    O(P + log R + k) per query.
    """

    def __init__(self, version: int) -> None:
        self.version = version
        self._holders: dict[IPNetwork, set[Holder]] = {}
        self._starts: list[tuple[int, int]] = []  # (network address, prefix length), sorted
        self._prefix_lengths: dict[int, int] = {}  # prefix length -> number of CIDRs

    def __len__(self) -> int:
        return len(self._holders)

    def __contains__(self, cidr: object) -> bool:
        return cidr in self._holders

    def holders(self, cidr: IPNetwork) -> frozenset[Holder]:
        return frozenset(self._holders.get(cidr, ()))

    def add(self, cidr: IPNetwork, holder: Holder) -> bool:
        """Reserve `cidr` for `holder`; True when the CIDR was not reserved before."""
        self._check(cidr)
        holders = self._holders.get(cidr)
        if holders is not None:
            holders.add(holder)
            return False
        self._holders[cidr] = {holder}
        bisect.insort(self._starts, (int(cidr.network_address), cidr.prefixlen))
        self._prefix_lengths[cidr.prefixlen] = self._prefix_lengths.get(cidr.prefixlen, 0) + 1
        return True

    def remove(self, cidr: IPNetwork, holder: Holder) -> bool:
        """Drop `holder`'s reservation; True when nobody reserves `cidr` any more."""
        holders = self._holders.get(cidr)
        if holders is None or holder not in holders:
            return False
        holders.discard(holder)
        if holders:
            return False
        del self._holders[cidr]
        key = (int(cidr.network_address), cidr.prefixlen)
        del self._starts[bisect.bisect_left(self._starts, key)]
        self._prefix_lengths[cidr.prefixlen] -= 1
        if not self._prefix_lengths[cidr.prefixlen]:
            del self._prefix_lengths[cidr.prefixlen]
        return True

    def intersecting(self, cidr: IPNetwork) -> list[IPNetwork]:
        """Reserved CIDRs equal to, containing or contained in `cidr`."""
        if cidr.version != self.version:
            return []
        found = [
            supernet
            for length in self._prefix_lengths
            if length < cidr.prefixlen
            and (supernet := cidr.supernet(new_prefix=length)) in self._holders
        ]
        start, end = int(cidr.network_address), int(cidr.broadcast_address)
        low = bisect.bisect_left(self._starts, (start, cidr.prefixlen))
        high = bisect.bisect_right(self._starts, (end, cidr.max_prefixlen))
        found.extend(_network(self.version, s, p) for s, p in self._starts[low:high])
        return found

    def _check(self, cidr: IPNetwork) -> None:
        if cidr.version != self.version:
            raise ValueError(f"{cidr} is not IPv{self.version}")


def _network(version: int, start: int, prefix: int) -> IPNetwork:
    if version == 4:
        return ipaddress.IPv4Network((start, prefix))
    return ipaddress.IPv6Network((start, prefix))
