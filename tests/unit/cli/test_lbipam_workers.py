"""service-lb-ipam's composition: the kit runs it with `Settings.workers` workers, and its API
client has as many threads of its own (and a few spare), so that many writes are really in
flight at once whatever the machine's CPU count (the event loop's default executor has
min(32, CPUs + 4) threads, shared by every controller of the process)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from local_ccm.cli import lbipam
from local_ccm.kube.aio import AsyncClient
from local_ccm.lbipam.options import Settings
from tests.unit.cli.test_write_timeout import build, recorded


def test_the_unit_runs_settings_workers_with_as_many_threads_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    units = recorded(monkeypatch, lbipam, "kit_unit")
    clients: list[tuple[object, ...]] = []

    def client(*args: Any) -> AsyncClient:
        clients.append(args)
        return AsyncClient(*args)

    monkeypatch.setattr(lbipam, "AsyncClient", client)
    build("lbipam", ["--leader-elect=false"])
    workers = Settings().workers
    assert workers > 1
    assert [kw["workers"] for kw in units] == [workers]
    [(_, threads)] = clients
    assert isinstance(threads, ThreadPoolExecutor)
    assert threads._max_workers == workers + lbipam.SPARE_THREADS
    threads.shutdown()
