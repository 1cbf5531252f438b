"""The LeaseApi contract against KubeLeaseApi on the real apiserver (twin of the unit test)."""

from __future__ import annotations

import asyncio

import pytest

from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.lease.elector import KubeLeaseApi
from tests.contracts.lease_api import CHECKS, Check, check_id


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_kube_lease_api_honours_the_contract(
    check: Check, kube: Client, test_namespace: str, unique_name: str
) -> None:
    asyncio.run(check(KubeLeaseApi(AsyncClient(kube), test_namespace, unique_name, timeout=5)))
