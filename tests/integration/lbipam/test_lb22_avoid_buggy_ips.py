"""LB22: MetalLB's `avoidBuggyIPs` on a real apiserver.

The CRD keeps `spec.avoidBuggyIPs` (a structural schema prunes an unknown field silently) and
refuses a non-boolean; a pool with it set never hands out an IPv4 address ending in .0 or .255,
refuses a request for one, and counts without them.
"""

from __future__ import annotations

import ipaddress
import secrets

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import Invalid
from local_ccm.lbipam.api import POOLS
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

SETTLE = lb.SETTLE


def test_lb22_the_crd_refuses_a_non_boolean_avoid_buggy_ips(kube: Client, crds: object) -> None:
    body = {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
            "metadata": {"name": f"lb22-{secrets.token_hex(3)}"},
            "spec": {"addresses": ["198.18.0.0/30"], "avoidBuggyIPs": "yes"}}  # fmt: skip
    with pytest.raises(Invalid) as refused:
        kube.create(POOLS, body)
    assert "avoidBuggyIPs" in str(refused.value)


def test_lb22_a_pool_avoiding_buggy_ips_never_hands_out_dot_0_or_dot_255(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    pool = space.pool([f"{net}.0/30", f"{net}.252/30"], allowFirstAndLast=True,
                      avoidBuggyIPs=True)  # fmt: skip
    assert kube.get(POOLS, pool)["spec"].get("avoidBuggyIPs") is True  # kept, not pruned
    start_lb()
    space.service("asks", annotations={"lb.local-ccm.io/ips": f"{net}.255"})
    assert "is in no pool" in str(lb.refused(space, "asks", "AddressNotInPool")["message"])
    for n in range(6):
        space.service(f"s{n}")
    got = sorted((lb.allocated(space, f"s{n}")[0] for n in range(6)), key=ipaddress.ip_address)
    assert got == [f"{net}.{n}" for n in (1, 2, 3, 252, 253, 254)]
    space.service("one-more")
    lb.refused(space, "one-more", "PoolExhausted")
    full = {"total": "6", "used": "6", "free": "0"}
    eventually(lambda: lb.pool_status(kube, pool).get("ipv4") == full, timeout=SETTLE,
               message="6 addresses, all used")  # fmt: skip
