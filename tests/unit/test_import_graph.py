"""No import cycle anywhere in ``local_ccm``: modules that import each other (directly or
around a circle, ``if TYPE_CHECKING:`` imports included) are one module in disguise. And the
agent's longest chain of imports stays short: a pass that one change moves through many modules
is hard to follow.

Runs as a unit test and as a script (``make lint``)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from functools import cache

import grimp

AGENT_LONGEST_CHAIN = 7  # modules, inside local_ccm.agent


def import_graph(package: str = "local_ccm") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports."""
    graph = grimp.build_graph(package, cache_dir=None)
    return {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm,
    iterative), each sorted; a module importing itself counts too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = _pop_component(stack, on_stack, node)
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def longest_chain(graph: Mapping[str, Iterable[str]], package: str) -> list[str]:
    """The longest chain of imports between modules of ``package`` (the graph has no cycle),
    as the modules along it; the first one found of that length."""
    inside = {m for m in graph if m == package or m.startswith(package + ".")}

    @cache
    def from_(module: str) -> tuple[str, ...]:
        longest: tuple[str, ...] = ()
        for child in sorted(graph.get(module, ())):
            if child in inside and child != module and len(from_(child)) > len(longest):
                longest = from_(child)
        return (module, *longest)

    best: tuple[str, ...] = ()
    for module in sorted(inside):
        if len(from_(module)) > len(best):
            best = from_(module)
    return list(best)


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    component = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == root:
            return component


def test_cycles_finds_a_circle_and_ignores_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]


def test_no_import_cycle_in_local_ccm() -> None:
    assert cycles(import_graph()) == []


def test_longest_chain_follows_the_longest_path() -> None:
    graph = {"p.a": {"p.b", "p.c"}, "p.b": {"p.c", "q.x"}, "p.c": set(), "q.x": {"p.a"}}
    assert longest_chain(graph, "p") == ["p.a", "p.b", "p.c"]


def test_the_agents_longest_import_chain_is_short() -> None:
    chain = longest_chain(import_graph(), "local_ccm.agent")
    assert len(chain) <= AGENT_LONGEST_CHAIN, " -> ".join(chain)


if __name__ == "__main__":
    found = cycles(import_graph())
    for component in found:
        print("import cycle: " + " <-> ".join(component), file=sys.stderr)
    sys.exit(1 if found else 0)
