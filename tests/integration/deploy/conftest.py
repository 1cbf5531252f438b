"""Fixtures of the chart checks (spec/deploy.md §9, TESTING.md §6 and §3.9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chart import Helm, helm, pinned_kube_version


@pytest.fixture(scope="session")
def chart_helm(helm_binary: Path) -> Iterator[Helm]:
    """helm with private HELM_* directories, shared by the session."""
    with helm(helm_binary) as h:
        yield h


@pytest.fixture(scope="session")
def kube_version() -> str:
    """The control plane's version: every render of a test that talks to it uses this."""
    return pinned_kube_version()
