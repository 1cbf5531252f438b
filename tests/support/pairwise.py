"""Pairwise combinations of a chart's toggles, derived from its values.schema.json.

A toggle is every property whose schema is a boolean (true, false; also null where the type
allows it) or an enum. `covering_rows` picks rows (one value per toggle) such that every pair of
values of two different toggles appears in at least one row: a fault that needs two settings
together shows up, with far fewer renders than the full product (2^50 and more).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import combinations
from typing import Any

Path = tuple[str, ...]
Pair = tuple[tuple[int, int], tuple[int, int]]  # ((factor, value index), (factor, value index))


def toggles(schema: Mapping[str, Any], path: Path = ()) -> dict[Path, tuple[Any, ...]]:
    """Every boolean and enum property of `schema` (nested objects walked), with its values."""
    found: dict[Path, tuple[Any, ...]] = {}
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "enum" in schema:
        found[path] = tuple(schema["enum"])
    elif "boolean" in kinds:
        found[path] = (True, False, None) if "null" in kinds else (True, False)
    for name, sub in (schema.get("properties") or {}).items():
        found.update(toggles(sub, (*path, name)))
    return found


def all_pairs(sizes: Sequence[int]) -> set[Pair]:
    return {((i, a), (j, b)) for i, j in combinations(range(len(sizes)), 2)
            for a in range(sizes[i]) for b in range(sizes[j])}  # fmt: skip


def pairs_of(row: Sequence[int]) -> Iterator[Pair]:
    for i, j in combinations(range(len(row)), 2):
        yield (i, row[i]), (j, row[j])


def covering_rows(sizes: Sequence[int], *, seed: int = 0, tries: int = 16) -> list[list[int]]:
    """Rows of value indexes covering every pair (greedy, AETG-like, deterministic)."""
    rng = random.Random(seed)
    uncovered = all_pairs(sizes)
    rows: list[list[int]] = []
    while uncovered:
        best, gain = [], -1
        for _ in range(tries):
            row = _candidate(sizes, uncovered, rng)
            new = sum(p in uncovered for p in pairs_of(row))
            if new > gain:
                best, gain = row, new
        uncovered -= set(pairs_of(best))
        rows.append(best)
    return rows


def _candidate(sizes: Sequence[int], uncovered: set[Pair], rng: random.Random) -> list[int]:
    """A row that covers one uncovered pair for sure, then greedily as many others as it can."""
    (i, a), (j, b) = min(uncovered) if rng.random() < 0.5 else rng.choice(sorted(uncovered))
    row = [-1] * len(sizes)
    row[i], row[j] = a, b
    order = [k for k in range(len(sizes)) if k not in (i, j)]
    rng.shuffle(order)
    for k in order:
        scores = []
        for v in range(sizes[k]):
            score = sum(
                ((m, row[m]), (k, v)) in uncovered if m < k else ((k, v), (m, row[m])) in uncovered
                for m in range(len(sizes)) if row[m] >= 0
            )  # fmt: skip
            scores.append((score, rng.random(), v))
        row[k] = max(scores)[2]
    return row


def pack(
    pairs: Iterable[Pair], close: Callable[[dict[int, int]], dict[int, int] | None] = dict,
) -> list[dict[int, int]]:  # fmt: skip
    """Partial rows (factor -> value index) holding the pairs, first fit, in sorted order.

    A factor a row does not name stays at its default: for pairs a previous row lost (a repair
    changed one of its values), a row of only the pairs still wanted triggers far fewer repairs
    than a full one, and holds many pairs instead of one. `close` completes a row with what its
    values are known to need, or says (None) that they contradict each other; a pair that
    contradicts itself is in no row.
    """
    rows: list[dict[int, int]] = []
    for (i, a), (j, b) in sorted(pairs):
        for n, row in enumerate(rows):
            if row.get(i, a) == a and row.get(j, b) == b:
                closed = close({**row, i: a, j: b})
                if closed is not None:
                    rows[n] = closed
                    break
        else:
            alone = close({i: a, j: b})
            if alone is not None:
                rows.append(alone)
    return rows


def nested(assignment: Mapping[Path, Any]) -> dict[str, Any]:
    """{("a", "b"): 1} as {"a": {"b": 1}}, a Helm values document."""
    doc: dict[str, Any] = {}
    for path, value in assignment.items():
        node = doc
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return doc
