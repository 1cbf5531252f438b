"""`make test`'s pytest runs: the real-node tier beside every other tier but bench, which runs
on two workers.

The real-node tier waits on real programs (a kubelet registering, containerd starting Pods, helm
waiting for rollouts) on planes of its own, and its tests are serial among themselves (one node
snapshot at a time); nothing it makes is visible to the other tiers' tests, nor theirs to it
(its host snapshot leaves their objects out: tests/support/hostsnap.py). So it runs as a second
pytest beside the first, its output in a file, printed after the first finished: the tail when
it passed, all of it when it failed. The exit code is the first non-zero of the two.

    python -m tests.support.alltiers [pytest arguments for both runs...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from tests.support import names
from tests.support.controlplane import artifacts_root

PYTEST = (sys.executable, "-m", "pytest")
REALNODE = ("-m", "realnode")
# Every other tier on two xdist workers, a whole test file per worker (module fixtures and
# module-wide planes stay in one process); each worker starts a shared plane of its own.
OTHERS = ("-m", "not bench and not realnode", "-n", "2", "--dist", "loadfile")
PASSED_TAIL = 60  # lines of a green real-node run: its durations and summary


def commands(extra: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the real-node run, every other tier's run)."""
    return [*PYTEST, *REALNODE, *extra], [*PYTEST, *OTHERS, *extra]


def report(output: str, code: int) -> str:
    """What is printed of the real-node run: all of a failed run, the tail of a green one."""
    lines = output.splitlines()
    shown = lines if code != 0 else lines[-PASSED_TAIL:]
    head = f"==== the real-node tier (pytest -m realnode), exit {code}"
    cut = "" if len(shown) == len(lines) else f"; its last {len(shown)} lines"
    return "\n".join([f"{head}{cut} ====", *shown, ""])


def first_failure(*codes: int) -> int:
    return next((c for c in codes if c != 0), 0)


def main(argv: Sequence[str]) -> int:
    realnode, others = commands(argv)
    log_dir = artifacts_root(os.environ)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"realnode-tier-{names.new_run_id(datetime.now(UTC), os.getpid())}.log"
    print(f"the real-node tier runs beside the others; its output: {log}", flush=True)
    with log.open("w") as out:
        beside = subprocess.Popen(realnode, stdout=out, stderr=subprocess.STDOUT)
        first = subprocess.Popen(others)
        children = (first, beside)

        def stop(signum: int, _frame: object) -> None:
            """`timeout` (or a CI cancel) signals this process only: pass it on, so both
            pytest runs tear their planes and nodes down."""
            for child in children:
                child.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        main_code, node_code = first.wait(), beside.wait()
    print(report(log.read_text(errors="replace"), node_code), flush=True)
    return first_failure(main_code, node_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
