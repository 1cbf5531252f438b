"""The real ``local-ccm`` binary, unprivileged, the whole process in a namespace: Go-style
syntax, detect mode, token rotation, health and metrics, SIGTERM (A26, A27, A31-A33)."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_fixtures import A01Agent
from tests.support.agent_harness import FAST, taint_keys
from tests.support.agent_process import (
    HEALTH_PORT,
    METRICS_PORT,
    SERVICE_ACCOUNT,
    AgentProcess,
    add_bound_pod,
    agent_for_node,
    agent_kubeconfig,
    copy_kubeconfig,
    create_agent_identity,
    private_dir,
    request_token,
    run_binary,
    write_private,
)
from tests.support.agent_scenarios import (
    A01_ADDRESSES,
    A01_ARGS,
    NodeRecorder,
    a01_network,
    initialised,
    kubelet_seed,
    move_address,
    pairs,
)
from tests.support.chart import ShippedRbac
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.logtext import answer_pattern
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually
from tests.support.webhook import RaceWebhook, is_agent_patch

UNAUTHORIZED = answer_pattern(401, "Unauthorized")  # in the agent's log

pytestmark = pytest.mark.netns


def test_a26_go_style_flag_syntax(
    *,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> None:
    up = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.10")["metadata"]["name"]
    kubelet_seed(kube, name)
    identity = create_agent_identity(
        kube,
        track,
        rbac=shipped_agent_rbac,
        name=f"lccm-{name}"[:60],
        namespace=test_namespace,
        node=name,
        labels=test_labels,
    )
    source = control_plane.token_kubeconfig(SERVICE_ACCOUNT, test_namespace, bound_pod=identity.pod)
    config = copy_kubeconfig(private_dir(test_artifacts), source)
    log = test_artifacts / "agent.log"
    go_style = ["-node-name", name, "-v", "2", "--remove-taint=false", "-run-once"]
    done = run_binary(
        up.node.name, go_style, log_path=log, kubeconfig=config, api_url=control_plane.api_url
    )
    assert done.code == 0, done
    node = kube.get(r.NODES, name)
    assert pairs(node) == [
        ("InternalIP", "192.0.2.10"),
        ("ExternalIP", "198.51.100.10"),
        ("Hostname", name),
    ], node["status"]
    assert names.UNINITIALIZED_TAINT in taint_keys(node)
    stray = ["-node-name", name, "--remove-taint", "false", "-run-once"]
    done = run_binary(
        up.node.name, stray, log_path=log, kubeconfig=config, api_url=control_plane.api_url
    )
    assert done.code == 2, done
    assert 'unexpected argument "false"' in done.stderr, done.stderr
    assert "use --remove-taint=false" in done.stderr, done.stderr


def test_a27_detect_mode_without_credentials(*, netns: NetnsFactory, test_artifacts: Path) -> None:
    up = netns.uplink(v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None)  # default route: 8.8.8.8
    up.node.ip("route", "add", "blackhole", "198.51.100.99")
    log = test_artifacts / "detect.log"
    argv = ["detect", "--internal-ip-target=192.0.2.1", "--output=json"]
    done = run_binary(up.node.name, argv, log_path=log)  # no kubeconfig, HOME is empty
    assert done.code == 0, done
    report = json.loads(done.stdout)
    assert {"detections", "candidates"} <= set(report), report
    text = json.dumps(report["detections"])
    assert "192.0.2.10" in text, report["detections"]
    assert any("192.0.2.10" in json.dumps(c) for c in report["candidates"]), report
    unroutable = ["detect", "--internal-ip-target=198.51.100.99", "--output=json"]
    done = run_binary(up.node.name, unroutable, log_path=log)
    assert done.code == 1, done


@pytest.mark.timeout(120)  # token re-read and the settle time on a busy machine
def test_a31_token_rotation_keeps_the_agent_working(
    *,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    first = create_agent_identity(
        kube,
        track,
        rbac=shipped_agent_rbac,
        name=f"lccm-{name}"[:60],
        namespace=test_namespace,
        node=name,
        labels=test_labels,
    )
    home = private_dir(test_artifacts)
    token_file = write_private(home / "token", request_token(kube, first))
    config = agent_kubeconfig(
        home, control_plane.api_url, control_plane.ca_pem, token_file=token_file
    )
    agent = AgentProcess(
        ns.name,
        [f"--node-name={name}", *A01_ARGS, *FAST],
        log_path=test_artifacts / "agent.log",
        kubeconfig=config,
        api_url=control_plane.api_url,
    )
    with agent:
        eventually(lambda: initialised(kube, name), timeout=10, message="initialised")
        agent.wait_ready()
        second = add_bound_pod(kube, first, name, test_labels)
        write_private(token_file, request_token(kube, second))
        kube.delete(r.PODS, first.pod, namespace=first.namespace, grace_period_seconds=0)
        move_address(ns, "eth0", "198.51.100.10/24", "198.51.100.20/24", "198.51.100.1")
        expected = [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.20")]
        eventually(
            lambda: pairs(kube.get(r.NODES, name)) == expected,
            timeout=30,
            message="the address change is written with the new token",
        )
        assert agent.exited() is None
    unauthorized = [line for line in agent.log().splitlines() if UNAUTHORIZED.search(line)]
    assert len(unauthorized) <= 1, unauthorized


def hold_until(release: threading.Event) -> None:
    """Keep the request in admission (bounded below the webhook's 15 s timeout)."""
    release.wait(12)


EXPECTED_METRICS = (
    "local_ccm_build_info",
    "local_ccm_agent_detections_total",
    "local_ccm_agent_detected_address_info",
    "local_ccm_agent_passes_total",
    "local_ccm_agent_pass_duration_seconds_count",
    "local_ccm_agent_node_writes_total",
    "rest_client_requests_total",
    "rest_client_request_duration_seconds_count",
    "local_ccm_agent_watch_restarts_total",
    "local_ccm_agent_netlink_events_total",
    "local_ccm_agent_taint_removal_delay_seconds_count",
    "local_ccm_agent_initialization_blocked",
    "local_ccm_agent_provided_node_ip_mismatch",
    "local_ccm_agent_address_reverts_total",
    "local_ccm_agent_address_conflict",
    "local_ccm_agent_last_sync_timestamp_seconds",
    "local_ccm_agent_node_present",
)


def test_a32_health_and_metrics(
    *,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
    unique_name: str,
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    release = threading.Event()
    # The agent's first status PATCH is held in admission until the test has seen /readyz 503.
    hook = RaceWebhook(
        kube,
        track,
        test_labels,
        name=unique_name,
        match=lambda q: is_agent_patch(q, "status"),
        action=lambda q: hold_until(release),
    )
    agent = agent_for_node(
        control_plane,
        kube,
        track,
        rbac=shipped_agent_rbac,
        namespace=test_namespace,
        node=name,
        netns=ns.name,
        argv=[*A01_ARGS, *FAST],
        log_path=test_artifacts / "agent.log",
        labels=test_labels,
    )
    with hook.start(probe_node=name), agent:
        eventually(hook.fired.is_set, timeout=20, message="the first pass is writing")
        readyz = agent.http_get(HEALTH_PORT, "/readyz")
        release.set()
        assert readyz.status == 503, readyz
        agent.wait_ready(timeout=10)
        eventually(lambda: initialised(kube, name), timeout=10, message="initialised")
        samples = {metric_name for metric_name, _ in agent.metrics()}
        assert agent.http_get(HEALTH_PORT, "/healthz").status == 200
    missing = [m for m in EXPECTED_METRICS if m not in samples]
    assert missing == [], sorted(samples)
    assert "process_cpu_seconds_total" in samples
    assert "python_info" in samples
    one_port = [
        "--metrics-bind-address=127.0.0.1:8092",
        "--health-probe-bind-address=127.0.0.1:8092",
    ]
    shared = agent_for_node(
        control_plane,
        kube,
        track,
        rbac=shipped_agent_rbac,
        namespace=test_namespace,
        node=name,
        netns=ns.name,
        argv=[*A01_ARGS, *FAST, *one_port],
        log_path=test_artifacts / "agent-one-port.log",
        labels=test_labels,
    )
    with shared:
        shared.wait_ready(port=METRICS_PORT)
        for path in ("/healthz", "/readyz", "/metrics"):
            assert shared.http_get(METRICS_PORT, path).status == 200, path


def test_a33_sigterm_exits_0_within_5s_and_leaves_the_node_alone(
    a01_agent: A01Agent, kube: Client
) -> None:
    name, agent, _ = a01_agent(FAST)
    with agent:
        node = eventually(lambda: initialised(kube, name), timeout=10, message="initialised")
        agent.wait_ready()
        node = kube.get(r.NODES, name)
        with NodeRecorder(kube, name, node["metadata"]["resourceVersion"]) as recorder:
            sent = time.monotonic()
            agent.signal(signal.SIGTERM)
            code = agent.wait(5)
            took = time.monotonic() - sent
            assert (
                kube.get(r.NODES, name)["metadata"]["resourceVersion"]
                == node["metadata"]["resourceVersion"]
            )
    assert code == 0
    assert took <= 5
    assert recorder.snapshot() == [], recorder.snapshot()
    assert pairs(node) == A01_ADDRESSES


def test_a_missing_permission_is_found_at_the_first_refusal_and_exits_4(
    *,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> None:
    """No permission check before the first pass (start-up requests count on every Node):
    the chart's RBAC without its events Role lets the agent initialise the Node, then the
    first Event is refused, the check runs and the agent exits 4 naming what is missing."""
    up = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.10")["metadata"]["name"]
    kubelet_seed(kube, name)
    without_events = ShippedRbac(
        tuple(o for o in shipped_agent_rbac.objects if not _grants_events(o))
    )
    identity = create_agent_identity(
        kube, track, rbac=without_events, name=f"lccm-{name}"[:60], namespace=test_namespace,
        node=name, labels=test_labels,
    )  # fmt: skip
    source = control_plane.token_kubeconfig(SERVICE_ACCOUNT, test_namespace, bound_pod=identity.pod)
    config = copy_kubeconfig(private_dir(test_artifacts), source)
    done = run_binary(
        up.node.name, ["--node-name", name, "--internal-ip-target=192.0.2.1"],
        log_path=test_artifacts / "agent.log", kubeconfig=config, api_url=control_plane.api_url,
    )  # fmt: skip
    assert done.code == 4, done
    missing = [line for line in done.stderr.splitlines() if "missing RBAC permissions" in line]
    assert missing, done.stderr
    assert "create events" in missing[0], done.stderr
    assert names.UNINITIALIZED_TAINT not in taint_keys(kube.get(r.NODES, name))


def _grants_events(obj: dict[str, object]) -> bool:
    rules = obj.get("rules") if obj.get("kind") == "Role" else None
    return isinstance(rules, list) and any("events" in rule.get("resources", ()) for rule in rules)
