"""Core `v1.NodeSelector` semantics for ClusterCIDR pools.

Pure, no I/O.

Terms are OR-ed, the requirements of a term AND-ed, a term without requirements matches
nothing, `matchFields` compares `metadata.name` with the Node name. Upstream AND-ed every term
and read `matchFields` keys as labels (kubernetes-sigs/node-ipam-controller#36); the
`--legacy-and-selector-terms` mode keeps the AND but still reads fields as fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm.labels import Requirement, int64, label_value, qualified_name
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError

NODE_NAME_FIELD = "metadata.name"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")

# Messages of the CRD's rules A7-A9, reused for stored objects.
EXPRESSION_VALUES_MESSAGE = (
    "values must be non-empty for In and NotIn, empty for Exists and DoesNotExist, "
    "and a single integer for Gt and Lt."
)
FIELD_MESSAGE = (
    "matchFields supports only key metadata.name with operator In or NotIn and exactly one value."
)


class SelectorError(ValueError):
    """A selector the controller cannot use; the message says why."""


@dataclass(frozen=True)
class Term:
    """One `nodeSelectorTerm`: label requirements and field requirements, all AND-ed."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    @property
    def size(self) -> int:
        return len(self.expressions) + len(self.fields)

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        """All requirements hold; a term with none matches nothing (core semantics)."""
        if not self.size:
            return False
        fields = {NODE_NAME_FIELD: name}
        return all(r.matches(labels) for r in self.expressions) and all(
            r.matches(fields) for r in self.fields
        )

    def canonical(self) -> str:
        return render(self.expressions + self.fields)


@dataclass(frozen=True, order=True)
class Match:
    """How a pool's selector matched a Node: the requirement count and canonical string that
    rank pools (`plan.rank_key`)."""

    requirements: int
    canonical: str


@dataclass(frozen=True)
class NodeSelector:
    """A parsed `spec.nodeSelector`. A pool without one (catch-all) has `None` instead."""

    terms: tuple[Term, ...]

    def match(self, labels: Mapping[str, str], name: str, *, legacy: bool = False) -> Match | None:
        """The best matching term's rank keys, or None when the Node is not selected."""
        if legacy:
            # Empty terms contribute nothing, so no requirement at all selects every Node.
            merged = self.merged()
            selected = not merged.size or merged.matches(labels, name)
            return Match(merged.size, merged.canonical()) if selected else None
        if not self.terms:
            return Match(0, "")  # `nodeSelectorTerms: []` selects every Node
        matches = [Match(t.size, t.canonical()) for t in self.terms if t.matches(labels, name)]
        # Highest requirement count wins; among equals the smallest string.
        return min(matches, key=lambda m: (-m.requirements, m.canonical), default=None)

    def merged(self) -> Term:
        """All requirements of all terms as one term: upstream's AND reading."""
        return Term(
            tuple(r for t in self.terms for r in t.expressions),
            tuple(r for t in self.terms for r in t.fields),
        )

    def semantics_differ(self) -> bool:
        """Whether OR-ed terms and the legacy AND reading can select different Nodes.

        They agree for `[]`, for one non-empty term (empty terms add nothing to an OR), and
        when every non-empty term is the same requirement list.
        """
        if not self.terms:
            return False
        non_empty = {t.canonical() for t in self.terms if t.size}
        return len(non_empty) != 1


def render(requirements: Sequence[Requirement]) -> str:
    """Requirements sorted by key, then text, joined with `,`."""
    ordered = sorted(requirements, key=lambda r: (r.key, str(r)))
    return ",".join(str(r) for r in ordered)


# ---------------------------------------------------------------- parsing


def parse_node_selector(raw: object) -> NodeSelector | None:
    """`spec.nodeSelector` of a ClusterCIDR; None (absent or null) means catch-all.

    Raises `SelectorError` for anything the CRD's rules A7-A9 reject or a label key or value
    of invalid syntax, so objects stored under an older CRD are caught too.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SelectorError("nodeSelector must be an object")
    terms = raw.get("nodeSelectorTerms")
    if terms is None:
        raise SelectorError("nodeSelector.nodeSelectorTerms is required")
    return NodeSelector(tuple(_term(i, t) for i, t in enumerate(_list(terms, "nodeSelectorTerms"))))


def _term(index: int, raw: object) -> Term:
    where = f"nodeSelectorTerms[{index}]"
    if raw is None:
        return Term()
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{where} must be an object")
    expressions = _list(raw.get("matchExpressions"), f"{where}.matchExpressions")
    fields = _list(raw.get("matchFields"), f"{where}.matchFields")
    return Term(
        tuple(_expression(f"{where}.matchExpressions[{i}]", r) for i, r in enumerate(expressions)),
        tuple(_field(f"{where}.matchFields[{i}]", r) for i, r in enumerate(fields)),
    )


def _list(raw: object, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SelectorError(f"{where} must be a list")
    return raw


def _parts(where: str, raw: object) -> tuple[str, str, list[str]]:
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{where} must be an object")
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values") or []
    if not isinstance(key, str) or not isinstance(operator, str):
        raise SelectorError(f"{where}: key and operator are required strings")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where}.values must be a list of strings")
    if operator not in OPERATORS:
        raise SelectorError(f"{where}.operator: unsupported value {operator!r}")
    return key, operator, values


def _expression(where: str, raw: object) -> Requirement:
    key, operator, values = _parts(where, raw)
    try:
        qualified_name(key)
        if operator in ("In", "NotIn"):
            for value in values:
                label_value(value)
    except ValidationError as err:
        raise SelectorError(f"{where}: {err}") from None
    if not _values_fit(operator, values):
        raise SelectorError(f"{where}: {EXPRESSION_VALUES_MESSAGE}")
    return Requirement(key, operator, tuple(values))  # type: ignore[arg-type]


def _values_fit(operator: str, values: list[str]) -> bool:
    if operator in ("In", "NotIn"):
        return bool(values)
    if operator in ("Exists", "DoesNotExist"):
        return not values
    return len(values) == 1 and int64(values[0]) is not None  # Go's ParseInt(…, 10, 64)


def _field(where: str, raw: object) -> Requirement:
    key, operator, values = _parts(where, raw)
    if key != NODE_NAME_FIELD or operator not in FIELD_OPERATORS or len(values) != 1:
        raise SelectorError(f"{where}: {FIELD_MESSAGE}")
    return Requirement(key, operator, tuple(values))  # type: ignore[arg-type]
