"""BlockSet and ReservationSet: pool arithmetic, lowest-free, memory, reservation queries."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ccm.ipam.core.cidrset import IPV6_MAX_BLOCKS, PAGE_BLOCKS, BlockSet, ReservationSet
from tests.unit.ipam.builders import nets


def blocks(pool: str, bits: int) -> BlockSet:
    network = ipaddress.ip_network(pool)
    return BlockSet(network, network.max_prefixlen - bits)


def used_indices(pool: BlockSet) -> list[int]:
    """Every used block index, ascending."""
    return [
        page_index * PAGE_BLOCKS + byte_index * 8 + bit
        for page_index, page in sorted(pool._pages.items())
        for byte_index, byte in enumerate(page)
        for bit in range(8)
        if byte & (1 << bit)
    ]


def memory_bytes(pool: BlockSet) -> int:
    """Bytes held by the bitmap: leaf pages plus the page summary."""
    return sum(len(page) for page in pool._pages.values()) + (pool._full.bit_length() + 7) // 8


@pytest.mark.parametrize(
    ("pool", "bits", "index", "expected"),
    [
        ("10.244.0.0/16", 8, 5, "10.244.5.0/24"),
        ("192.0.2.0/24", 4, 3, "192.0.2.48/28"),
        ("fd00:10:244::/112", 8, 1, "fd00:10:244::100/120"),
        ("fd00:10:244::/56", 64, 1, "fd00:10:244:1::/64"),
        ("2001:db8:7::/48", 64, 255, "2001:db8:7:ff::/64"),
        ("2001:db8::/32", 80, 6425, "2001:db8:1919::/48"),
    ],
)
def test_block_arithmetic_matches_the_spec_table(
    pool: str, bits: int, index: int, expected: str
) -> None:
    assert str(blocks(pool, bits).block(index)) == expected


def test_capacity_is_two_to_the_prefix_difference() -> None:
    assert blocks("10.244.0.0/16", 8).capacity == 256
    assert blocks("198.18.0.0/15", 0).capacity == 1 << 17
    assert blocks("2001:db8::/112", 8).capacity == 256


def test_zero_blocks_and_too_many_ipv6_blocks_are_rejected() -> None:
    with pytest.raises(ValueError, match="zero blocks"):
        blocks("10.0.0.0/24", 10)
    with pytest.raises(ValueError, match="zero blocks"):
        blocks("10.0.0.0/24", -1)
    with pytest.raises(ValueError, match="65536"):
        blocks("2001:db8::/32", 64)
    assert blocks("2001:db8::/48", 64).capacity == IPV6_MAX_BLOCKS


def test_block_outside_the_pool_raises_index_error() -> None:
    with pytest.raises(IndexError):
        blocks("10.0.0.0/23", 8).block(2)


@pytest.mark.parametrize(
    ("cidr", "expected"),
    [
        ("10.0.1.0/24", range(1, 2)),  # equal to a block
        ("10.0.1.128/25", range(1, 2)),  # inside a block: the containing block
        ("10.0.2.0/23", range(2, 4)),  # covering two blocks
        ("10.0.0.0/8", range(0, 4)),  # containing the pool
        ("10.1.0.0/24", range(0)),  # disjoint
        ("2001:db8::/64", range(0)),  # other family
    ],
)
def test_index_range_is_every_block_the_cidr_intersects(cidr: str, expected: range) -> None:
    assert blocks("10.0.0.0/22", 8).index_range(nets(cidr)[0]) == expected


def test_allocate_takes_the_lowest_free_block() -> None:
    pool = blocks("10.0.0.0/22", 8)
    assert [str(pool.allocate()) for _ in range(2)] == ["10.0.0.0/24", "10.0.1.0/24"]
    pool.release(range(0, 1))
    assert str(pool.allocate()) == "10.0.0.0/24"
    assert str(pool.allocate()) == "10.0.2.0/24"


def test_occupy_and_release_report_how_many_blocks_changed() -> None:
    pool = blocks("10.0.0.0/16", 8)
    assert pool.occupy(range(10, 20)) == 10
    assert pool.occupy(range(15, 25)) == 5
    assert pool.used == 15
    assert pool.release(range(0, 12)) == 2
    assert pool.used == 13
    assert pool.lowest_free() == 0
    assert used_indices(pool) == list(range(12, 25))


def test_pool_of_two_to_the_sixteen_blocks_allocates_all_then_reports_exhaustion() -> None:
    pool = blocks("2001:db8::/104", 8)
    assert pool.capacity == 1 << 16
    base, step = int(pool.network.network_address), 1 << 8
    seen = set()
    for expected in range(1 << 16):
        cidr = pool.allocate()
        assert cidr is not None
        assert int(cidr.network_address) == base + expected * step  # lowest free, in order
        seen.add(cidr)
    assert len(seen) == 1 << 16
    assert pool.allocate() is None
    assert pool.lowest_free() is None
    assert (pool.used, pool.free) == (1 << 16, 0)


def test_memory_is_one_bit_per_block_for_a_full_pool() -> None:
    pool = blocks("198.18.0.0/15", 8)  # 512 blocks
    pool.occupy(range(pool.capacity))
    assert memory_bytes(pool) <= pool.capacity // 8 + 1
    big = blocks("2001:db8::/104", 8)  # 2^16 blocks: two pages
    big.occupy(range(big.capacity))
    assert memory_bytes(big) <= -(-big.capacity // 8) + 1


def test_memory_of_a_full_two_to_the_twenty_four_pool_stays_under_two_and_a_half_mib() -> None:
    pool = blocks("0.0.0.0/0", 8)  # 2^24 blocks
    pool.occupy(range(pool.capacity))
    assert pool.used == 1 << 24
    assert pool.lowest_free() is None
    assert memory_bytes(pool) <= (1 << 24) // 8 + 64
    assert memory_bytes(pool) <= int(2.5 * 1024 * 1024)


def test_untouched_regions_cost_nothing_even_for_two_to_the_thirty_two_blocks() -> None:
    pool = blocks("0.0.0.0/0", 0)
    assert pool.capacity == 1 << 32
    assert memory_bytes(pool) == 0
    pool.occupy(range(5))
    pool.occupy(range((1 << 32) - 1, 1 << 32))
    assert memory_bytes(pool) == 2 * PAGE_BLOCKS // 8
    assert pool.lowest_free() == 5
    pool.release(range(0, 5))
    pool.release(range((1 << 32) - 1, 1 << 32))
    assert memory_bytes(pool) == 0


def test_small_pool_page_is_rounded_up_to_whole_bytes() -> None:
    pool = blocks("10.0.0.0/22", 8)
    pool.allocate()
    assert memory_bytes(pool) == 1


def test_full_page_is_skipped_by_the_summary() -> None:
    pool = blocks("2001:db8::/104", 8)
    pool.occupy(range(PAGE_BLOCKS))
    assert pool.lowest_free() == PAGE_BLOCKS
    pool.release(range(PAGE_BLOCKS - 1, PAGE_BLOCKS))
    assert pool.lowest_free() == PAGE_BLOCKS - 1


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 299), st.integers(0, 40)),
        max_size=40,
    )
)
def test_blockset_agrees_with_a_plain_set(ops: list[tuple[bool, int, int]]) -> None:
    pool = blocks("10.0.0.0/23", 0)  # 512 blocks over one page
    model: set[int] = set()
    for used, start, length in ops:
        span = range(start, min(start + length, pool.capacity))
        before = len(model)
        changed = pool.occupy(span) if used else pool.release(span)
        model = model | set(span) if used else model - set(span)
        assert changed == abs(len(model) - before)
        assert pool.used == len(model)
        free = [i for i in range(pool.capacity) if i not in model]
        assert pool.lowest_free() == (free[0] if free else None)
    assert used_indices(pool) == sorted(model)


# ---------------------------------------------------------------- ReservationSet


def test_intersecting_finds_equal_containing_and_contained_reservations() -> None:
    rs = ReservationSet(4)
    for cidr in nets("10.0.0.0/8", "10.1.0.0/24", "10.1.0.128/25", "10.2.0.0/24", "192.0.2.0/24"):
        rs.add(cidr, ("node", str(cidr)))
    found = rs.intersecting(nets("10.1.0.0/16")[0])
    assert sorted(found) == sorted(nets("10.0.0.0/8", "10.1.0.0/24", "10.1.0.128/25"))
    assert rs.intersecting(nets("10.1.0.0/24")[0]) == list(
        nets("10.0.0.0/8", "10.1.0.0/24", "10.1.0.128/25")
    )
    assert rs.intersecting(nets("172.16.0.0/12")[0]) == []
    assert rs.intersecting(nets("2001:db8::/32")[0]) == []


def test_a_cidr_stays_reserved_until_its_last_holder_lets_go() -> None:
    rs = ReservationSet(6)
    cidr = nets("2001:db8::/64")[0]
    assert rs.add(cidr, ("node", "a")) is True
    assert rs.add(cidr, ("node", "b")) is False
    assert rs.remove(cidr, ("node", "a")) is False
    assert rs.intersecting(cidr)
    assert rs.remove(cidr, ("node", "zzz")) is False
    assert rs.remove(cidr, ("node", "b")) is True
    assert not rs.intersecting(cidr)
    assert len(rs) == 0


def test_reservation_set_refuses_the_other_family() -> None:
    with pytest.raises(ValueError, match="IPv4"):
        ReservationSet(4).add(nets("2001:db8::/64")[0], ("node", "a"))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 255), st.integers(24, 32)), max_size=30),
    st.integers(0, 255),
    st.integers(20, 32),
)
def test_intersecting_agrees_with_brute_force(
    entries: list[tuple[int, int]], qaddr: int, qlen: int
) -> None:
    rs = ReservationSet(4)
    networks = {ipaddress.ip_network((0x0A000000 + (a << 0), p), strict=False) for a, p in entries}
    for network in networks:
        rs.add(network, ("node", str(network)))
    query = ipaddress.ip_network((0x0A000000 + qaddr, qlen), strict=False)
    expected = {n for n in networks if n.overlaps(query)}
    assert set(rs.intersecting(query)) == expected
