"""Composition root: parses flags, builds adapters and starts one component.

The three console scripts land here. Components are wired in later issues
(#3 agent, #4 node-lifecycle-controller, #5 node-ipam-controller).
"""

from __future__ import annotations

import sys


def _not_yet(name: str, issue: int) -> int:
    print(f"{name}: not implemented yet (issue #{issue})", file=sys.stderr)
    return 1


def agent_main() -> int:
    return _not_yet("local-ccm", 3)


def lifecycle_main() -> int:
    return _not_yet("node-lifecycle-controller", 4)


def ipam_main() -> int:
    return _not_yet("node-ipam-controller", 5)
