"""service-lb-ipam's composition: the kit runs it with `Settings.workers` workers, and its API
adapter talks through the event-loop client, so that every worker's write is really in flight
at once whatever the machine's CPU count: no thread pool sized by the CPUs stands between the
workers and the connections."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm.cli import lbipam
from local_ccm.kube.loopclient import LoopClient
from local_ccm.lbipam.api import KubeLbApi
from local_ccm.lbipam.options import Settings
from tests.unit.cli.test_write_timeout import build, recorded


def test_the_unit_runs_settings_workers_on_the_loop_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    units = recorded(monkeypatch, lbipam, "kit_unit")
    apis: list[KubeLbApi] = []

    def api(*args: Any, **kw: Any) -> KubeLbApi:
        built = KubeLbApi(*args, **kw)
        apis.append(built)
        return built

    monkeypatch.setattr(lbipam, "KubeLbApi", api)
    build("lbipam", ["--leader-elect=false"])
    workers = Settings().workers
    assert workers > 1
    assert [kw["workers"] for kw in units] == [workers]
    [built] = apis
    assert isinstance(built.client, LoopClient)
