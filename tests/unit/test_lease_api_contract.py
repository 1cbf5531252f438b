"""The LeaseApi contract against FakeLeaseApi (its real-apiserver twin is in tests/integration)."""

from __future__ import annotations

import asyncio

import pytest

from tests.contracts.lease_api import CHECKS, Check, check_id
from tests.fakes.lease import FakeLeaseApi


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_fake_lease_api_honours_the_contract(check: Check) -> None:
    asyncio.run(check(FakeLeaseApi(name="t-contract", namespace="t-ns")))
