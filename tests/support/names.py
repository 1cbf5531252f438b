"""Names and labels for test objects. Pure, no I/O."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

RUN_LABEL = "test.local-ccm.io/run"
TEST_LABEL = "test.local-ccm.io/test"
# The longest name a namespace (a DNS-1123 label) may have; Nodes allow more, we use less.
MAX_NAME = 63
_NOT_NAME = re.compile(r"[^a-z0-9]+")


def new_run_id(now: datetime, pid: int) -> str:
    """A run id that is a valid label value and sorts by start time."""
    return f"{now:%Y%m%d-%H%M%S}-{pid}"


def slug(text: str, max_len: int) -> str:
    """Lower-case DNS-1123 fragment of `text`: runs of other characters become one '-'."""
    cut = _NOT_NAME.sub("-", text.lower()).strip("-")[:max_len].strip("-")
    return cut or "x"


def unique_name(test_name: str, hex6: str) -> str:
    """`t-<slug>-<6 hex>`, a DNS-1123 label of at most 63 characters."""
    room = MAX_NAME - len("t-") - len("-") - len(hex6)
    return f"t-{slug(test_name, room)}-{hex6}"


def test_id(nodeid: str) -> str:
    """A stable label value for one test: a readable slug plus a hash of the full node id."""
    digest = hashlib.sha256(nodeid.encode()).hexdigest()[:8]
    name = nodeid.rsplit("::", 1)[-1]
    return f"{slug(name, MAX_NAME - 9)}-{digest}"


def test_labels(run_id: str, nodeid: str) -> dict[str, str]:
    return {RUN_LABEL: run_id, TEST_LABEL: test_id(nodeid)}


def run_selector(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}"
