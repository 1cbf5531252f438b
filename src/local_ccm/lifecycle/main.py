"""Composition root of node-lifecycle-controller: parses flags, builds the adapters, runs the loop.

Called by `local_ccm.cli`; the component's loop lands with issue #4.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run node-lifecycle-controller: `argv` without the program name; returns the exit status."""
    del argv, env
    print("node-lifecycle-controller: not implemented yet (issue #4)", file=sys.stderr)
    return 1
