"""The real binary as uid 65532 with no capability, the whole process in a namespace (A28):
A01 and A10 pass unchanged."""

from __future__ import annotations

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from tests.support.agent_fixtures import A01Agent
from tests.support.agent_harness import FAST
from tests.support.agent_process import AGENT_UID
from tests.support.agent_scenarios import (
    A01_ADDRESSES,
    NodeRecorder,
    condition_is,
    events_with,
    initialised,
    pairs,
    reasons,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
NO_CAPS = "0000000000000000"


def test_a28_unprivileged_agent_initialises_and_follows_route_changes(
    a01_agent: A01Agent, kube: Client
) -> None:
    name, agent, ns = a01_agent(FAST)
    with agent:
        # A01, unchanged
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        assert pairs(node) == A01_ADDRESSES, node
        owned = node["metadata"]["annotations"][names.OWNED_ADDRESSES_ANNOTATION]
        assert owned == "InternalIP=192.0.2.10,ExternalIP=198.51.100.10"
        assert condition_is(kube, name, "True", "AddressesSynced")
        wanted = {"AddressesUpdated", "NodeInitialized"}
        eventually(lambda: wanted <= reasons(kube, name), timeout=10, message=f"Events {wanted}")
        status = agent.proc_status()
        assert status["Uid"].split()[:2] == [str(AGENT_UID)] * 2, status
        assert status["Gid"].split()[:2] == [str(AGENT_UID)] * 2, status
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert status[caps] == NO_CAPS, (caps, status)
        # A10, unchanged: netlink notifications reach an unprivileged socket
        with NodeRecorder(kube, name, node["metadata"]["resourceVersion"]) as recorder:
            ns.ip("route", "del", "default")
            lost = eventually(lambda: condition_is(kube, name, "False", "NoRoute"), timeout=10)
            assert pairs(lost) == A01_ADDRESSES, lost
            ns.ip("route", "add", "default", "via", "198.51.100.1", "dev", "eth0")
            eventually(lambda: condition_is(kube, name, "True", "AddressesSynced"), timeout=10)
            eventually(lambda: events_with(kube, name, "AddressDetectionRecovered"), timeout=10)
        assert recorder.address_lists() in ([], [A01_ADDRESSES]), recorder.address_lists()
