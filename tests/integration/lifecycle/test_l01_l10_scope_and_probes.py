"""L01-L10: scope, countdown and probe verdicts on the real
apiserver, with the real prober. Silent targets are unused addresses of the test's own /28;
reachable ones are loopback."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from local_ccm.kube.client import Client
from tests.integration.lifecycle.conftest import Setup
from tests.support.cleanup import NodeFactory
from tests.support.lifecycle_harness import (
    InProcessController,
    eligible_node,
    exists,
    options,
    reasons,
)
from tests.support.netns import HostLink
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
DELETED = 10.0  # "deleted" is checked within 10 s ...
OBSERVE = 10.0  # ... and "not deleted" by observing for 10 s


def controller(setup: Setup, *argv: str) -> InProcessController:
    """Default scope rules; the watch sees only this test's Nodes."""
    return InProcessController(options(setup.argv(*argv), setup.kubeconfig),
                               watch_selector=setup.selector)  # fmt: skip


def gone(kube: Client, node: dict[str, object]) -> bool:
    meta = node["metadata"]
    assert isinstance(meta, dict)
    return not exists(kube, meta["name"], meta["uid"])


def kept(kube: Client, *nodes: dict[str, object], seconds: float = OBSERVE) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for node in nodes:
            assert not gone(kube, node), f"{node['metadata']} was deleted"
        time.sleep(0.5)


def uid(node: dict[str, object]) -> str:
    meta = node["metadata"]
    assert isinstance(meta, dict)
    return str(meta["uid"])


def test_l01_default_scope_deletes_an_unreachable_autoscaled_node(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    w1 = eligible_node(make_node, str(link.unused_v4))
    with controller(setup) as c:
        eventually(lambda: gone(kube, w1), timeout=DELETED, message="w1 deleted")
        eventually(lambda: {"CheckingReachability", "DeletingNode"} <= set(reasons(kube, uid(w1))),
                   timeout=5, message="Events of w1")  # fmt: skip
        assert c.value("deletions_total", result="deleted") == 1


def test_l02_countdown_is_honoured(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4), ready="False", age=2)
    t0 = datetime.now(UTC) - timedelta(seconds=2)
    with controller(setup):
        until = (t0 + timedelta(seconds=9) - datetime.now(UTC)).total_seconds()
        kept(kube, node, seconds=until)
        eventually(lambda: gone(kube, node), timeout=5, message="deleted before t0 + 14 s")


def test_l03_a_ready_tainted_node_is_not_probed(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4), ready="True")
    with controller(setup) as c:
        kept(kube, node)
        assert sum(c.value("probes_total", kind="icmp", family="ipv4", outcome=o)
                   for o in ("reply", "no_reply", "no_route", "error")) == 0  # fmt: skip


def test_l04_an_untainted_notready_node_is_out_of_default_scope(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4), taints=())
    with controller(setup) as c:
        kept(kube, node)
        assert c.value("probes_total", kind="icmp", family="ipv4", outcome="no_reply") == 0


def test_l05_a_taint_with_another_effect_does_not_count(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoExecute"}
    node = eligible_node(make_node, str(link.unused_v4), taints=[taint])
    with controller(setup):
        kept(kube, node)


def test_l06_all_workers_mode_spares_control_plane_nodes(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    w2 = eligible_node(make_node, str(link.block[6]), taints=())
    cp1 = eligible_node(make_node, str(link.block[7]), taints=(),
                        labels={"node-role.kubernetes.io/master": ""})  # fmt: skip
    with controller(setup, "--watch-autoscaler-taint=false"):
        eventually(lambda: gone(kube, w2), timeout=DELETED, message="w2 deleted")
        kept(kube, cp1, seconds=3)


def test_l07_the_selector_overrides_the_taint_filter(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    pool = {"pool": f"spot-{setup.lease[-6:]}"}
    s1 = eligible_node(make_node, str(link.block[6]), taints=(), labels=pool)
    t1 = eligible_node(make_node, str(link.block[7]))
    s2 = eligible_node(make_node, str(link.block[8]), taints=(),
                       labels={**pool, "node-role.kubernetes.io/control-plane": ""})  # fmt: skip
    selector = f"pool={pool['pool']}"
    with controller(setup, f"--node-selector={selector}"):
        eventually(lambda: gone(kube, s1), timeout=DELETED, message="s1 deleted")
        kept(kube, t1, s2, seconds=3)


def test_l08_a_reachable_node_is_kept(setup: Setup, make_node: NodeFactory, kube: Client) -> None:
    node = eligible_node(make_node, "127.0.0.2")
    with controller(setup) as c:
        kept(kube, node, seconds=7)
        assert reasons(kube, uid(node)).count("NodeReachable") == 1
        assert c.value("probes_total", kind="icmp", family="ipv4", outcome="reply") >= 4


def test_l09_any_reply_of_any_address_wins(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4), "::1")
    with controller(setup):
        kept(kube, node)


def test_l10_a_dual_stack_unreachable_node_is_deleted(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4), str(link.unused_v6))
    with controller(setup) as c:
        eventually(lambda: gone(kube, node), timeout=DELETED, message="deleted")
        assert c.value("probes_total", kind="icmp", family="ipv6", outcome="no_reply") >= 1
