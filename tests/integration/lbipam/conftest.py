"""Fixtures of the service-lb-ipam scenarios: the pool CRD installed, a namespace of the
test's own (`space`), and `start_lb(*flags)` running the controller for the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support import lb
from tests.support.controlplane import ControlPlane
from tests.support.processes import Child, stop_all

StartLb = Callable[..., Child]


@pytest.fixture
def space(kube: Client, crds: object) -> Iterator[lb.Space]:
    yield from lb.space(kube)


@pytest.fixture
def start_lb(control_plane: ControlPlane, test_artifacts: Path) -> Iterator[StartLb]:
    started: list[Child] = []

    def start(*extra: str, leader_elect: bool = False) -> Child:
        log = test_artifacts / f"lb-{len(started)}.log"
        child = lb.start(control_plane.admin_kubeconfig, log, *extra, leader_elect=leader_elect)
        started.append(child)
        return child

    yield start
    stop_all(started, grace=5)
