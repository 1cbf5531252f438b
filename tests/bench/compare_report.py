"""Write the comparison of `make bench-compare` into docs/benchmarks.md:
``python -m tests.bench.compare_report``.

Reads each component's newest ``compare-<component>-<stamp>.json`` under docs/bench/data
(where ``python -m tests.bench.plots --from test-artifacts/bench`` has copied them) and replaces the
generated parts of the page between its ``<!-- bench-compare:... -->`` markers. The rendering
is tests/bench/compare_stats.py `render_page` (pure); the LoadBalancer peers' tables
(``compare-lb``), tests/bench/compare_peers.py; the start-up table against the Python floor,
tests/bench/floor_stats.py; the whole stack's section, and the one line about it between the
README's ``bench-compare:readme`` markers, tests/bench/stack_stats.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.bench import compare_peers, compare_stats, floor_stats, plot_data, stack_stats

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "bench" / "data"
PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"


def newest_results(data: Path) -> dict[str, Any]:
    newest = plot_data.newest_by_kind(p.name for p in data.glob("compare-*.json"))
    found = {}
    for component in (*compare_stats.COMPONENTS, compare_peers.COMPONENT):
        chosen = newest.get(f"compare-{component}")
        if chosen is not None:
            found[component] = json.loads((data / chosen.name).read_text())
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    results = newest_results(args.data)
    if not results:
        print(f"compare report: no compare-*.json in {args.data}", file=sys.stderr)
        return 1
    page = compare_stats.render_page(args.page.read_text(), results)
    page = floor_stats.render(page, results)
    if stack := results.get("stack"):
        page = stack_stats.render(page, stack)
        args.readme.write_text(stack_stats.render_readme(args.readme.read_text(), stack))
    if lb := results.get(compare_peers.COMPONENT):
        page = compare_peers.render_page(page, lb)
    args.page.write_text(page)
    print(f"compare report: {args.page} from {', '.join(sorted(results))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
