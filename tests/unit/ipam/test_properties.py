"""Hypothesis properties of the allocator: across any sequence of allocate,
commit, abort, release, foreign records and quarantine expiry, no block is handed out twice
or over a reservation, the lowest free block is taken, and status counts are exact."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from local_ccm.ipam.core.allocator import Allocation, Allocator, Waiting
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.model import Pool
from tests.unit.ipam.builders import allocator, cc, nets, node, one_term

RESERVED = nets("10.0.0.48/29")
POOLS = [
    cc("a", "10.0.0.0/27", "2001:db8::/124", 2, one_term(x="1")),  # 8 x /30, 4 x /126
    cc("b", "10.0.0.0/26", "", 3),  # catch-all over the same range: 8 x /29
]

Op = tuple[str, int, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 11), st.integers(0, 1)),
        st.tuples(st.just("abort"), st.integers(0, 11), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 11), st.just(0)),
        st.tuples(st.just("foreign"), st.integers(0, 63), st.integers(28, 31)),
        st.tuples(st.just("expire"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@dataclass
class Model:
    """What the allocator should hold: every live CIDR with its uid."""

    live: dict[str, list[IPNetwork]] = field(default_factory=dict)
    quarantined: list[tuple[float, IPNetwork]] = field(default_factory=list)

    def taken(self, now: float) -> list[IPNetwork]:
        held = [c for cidrs in self.live.values() for c in cidrs]
        return held + [c for _, c in self.quarantined] + list(RESERVED)


def _blocks(pool: Pool, version: int) -> list[IPNetwork]:
    family = pool.family(version)
    assert family is not None
    return list(family.network.subnets(new_prefix=family.block_prefix))


def _overlaps(cidr: IPNetwork, others: list[IPNetwork]) -> bool:
    return any(cidr.version == o.version and cidr.overlaps(o) for o in others)


def _check_allocation(result: Allocation, taken: list[IPNetwork]) -> None:
    pool = next(p.pool() for p in POOLS if p.name == result.pool)
    for cidr in result.cidrs:
        assert not _overlaps(cidr, taken), f"{cidr} handed out twice"
        free = [b for b in _blocks(pool, cidr.version) if not _overlaps(b, taken)]
        assert cidr == free[0], "not the lowest free block"


def _check_usage(alloc: Allocator, model: Model, now: float) -> None:
    taken = model.taken(now)
    for cc_view in POOLS:
        pool = cc_view.pool()
        usage = alloc.usage(pool.name)
        assert usage is not None
        for fam in usage.families:
            blocks = _blocks(pool, fam.network.version)
            used = sum(_overlaps(b, taken) for b in blocks)
            owned = [
                c
                for uid in model.live
                for c, o in alloc.ledger.node_cidrs(uid).items()
                if o == pool.name
            ]
            allocated = sum(_overlaps(b, owned) for b in blocks)
            assert (fam.capacity, fam.free) == (len(blocks), len(blocks) - used)
            assert (fam.allocated, fam.unavailable) == (allocated, used - allocated)


@settings(max_examples=150, deadline=None)
@given(ops, st.booleans())
def test_no_block_is_given_twice_and_usage_is_exact(sequence: list[Op], delay: bool) -> None:
    alloc = allocator(*POOLS, reserved=RESERVED, reuse_delay=5.0 if delay else 0.0)
    model, now = Model(), 0.0
    for kind, a, b in sequence:
        now += 1.0
        uid = f"u{a}"
        if kind == "alloc" and uid not in model.live:
            result = alloc.allocate(node(f"n{a}", {"x": "1"} if b else {}, uid=uid))
            if isinstance(result, Allocation):
                _check_allocation(result, model.taken(now))
                model.live[uid] = list(result.cidrs)
                if b:
                    alloc.commit(uid)
            else:
                assert isinstance(result, Waiting)
        elif kind == "abort" and uid in model.live and alloc.is_pending(uid):
            alloc.abort(uid)
            del model.live[uid]
        elif kind == "release":
            released = alloc.release(uid, now)
            assert list(released) == model.live.pop(uid, [])
            if delay:
                model.quarantined += [(now + 5.0, c) for c in released]
        elif kind == "foreign" and f"f{a}{b}" not in model.live:
            cidr = ipaddress.ip_network((0x0A000000 + a, b), strict=False)
            alloc.record(node(f"f{a}{b}", {}, [str(cidr)], uid=f"f{a}{b}"))
            model.live[f"f{a}{b}"] = [cidr]
        elif kind == "expire":
            alloc.ledger.expire(now)
            model.quarantined = [(t, c) for t, c in model.quarantined if t > now]
        _check_usage(alloc, model, now)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 63), st.integers(26, 31)), max_size=12))
def test_recovery_reserves_every_existing_cidr(existing: list[tuple[int, int]]) -> None:
    alloc = allocator(*POOLS, reserved=RESERVED)
    nodes = [
        node(f"e{i}", {}, [str(ipaddress.ip_network((0x0A000000 + a, p), strict=False))])
        for i, (a, p) in enumerate(existing)
    ]
    records = alloc.recover(nodes)
    taken = [c for n in nodes for c in n.pod_cidrs] + list(RESERVED)
    for rec in records:
        for _cidr, owner in rec.owners:
            assert owner in ("a", "b")  # every CIDR here lies inside both pools' range
    for i in range(20):
        result = alloc.allocate(node(f"new{i}", {"x": "1"}))
        if not isinstance(result, Allocation):
            break
        _check_allocation(result, taken)
        taken.extend(result.cidrs)
        alloc.commit(f"uid-new{i}")
