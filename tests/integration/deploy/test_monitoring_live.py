"""Monitoring against live processes: every binary's /metrics as the processes serve it on a
real apiserver (a plane of this module's own: the controllers act on every Node, CSR and
Service of a cluster), linted by `promtool check metrics`; the chart's alert rules and
Grafana dashboard read only series a live scrape has; and a real Prometheus scrapes the
controller manager's secure /metrics with a token the chart's metrics-reader ClusterRole
allows (`up` 1) and with one it does not (`up` 0, 403).

The processes, as the chart renders them (command, args, env, RBAC, ServiceAccount tokens;
only the listen addresses move to free loopback ports):
the agent `local-ccm` (uid 65532 in a network namespace, as A32 runs it), the standalone
`node-lifecycle-controller` and `node-ipam-controller`, then `local-ccm-controller-manager`
with all five controllers. So that every family has samples, the world has what each
controller reports on: a ClusterCIDR selecting the Node, a LoadBalancerIPPool with a Service,
a kubelet-serving CSR the approver denies (its requester is not the Node), and a NodeBMC for
the Node with its credentials Secret, naming a System of the real Redfish emulator."""

from __future__ import annotations

import contextlib
import json
import secrets
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from local_ccm.csr.api import CSRS
from local_ccm.kube.client import Client, Obj
from tests.integration.deploy.release import Release, apply_identity, render
from tests.integration.ipam.objects import cluster_cidr
from tests.support import bmc, crds, csrs, lb, names, pki
from tests.support import monitoring as mon
from tests.support import resources as r
from tests.support.agent_harness import FAST
from tests.support.agent_process import METRICS_PORT, agent_for_node
from tests.support.agent_scenarios import A01_ARGS, a01_network, initialised
from tests.support.binaries import Binaries, ensure
from tests.support.chart import CHART, Helm, ShippedRbac, component, parse, pinned_kube_version
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.dedicated import dedicated_plane
from tests.support.fixtures import run_state
from tests.support.netns import NetnsFactory, NetnsSession
from tests.support.podrun import PodFields, argv_of, container_env, pod_container
from tests.support.processes import Child, free_port, spawn, tail
from tests.support.sushy import SushyEmulator
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
READER, STRANGER = "prometheus", "stranger"
LIFECYCLE, IPAM = "node-lifecycle-controller", "node-ipam-controller"
MANAGER = "local-ccm-controller-manager"
CERT_SECRET = "local-ccm-metrics-cert"  # rendered as --metrics-cert-dir; the test's own dir
SETTLE = 45.0  # seconds for a controller to report on the objects above
LISTEN_FLAGS = ("metrics-bind-address", "health-probe-bind-address", "webserver-bind-address")
DASHBOARD = CHART / "files" / "dashboard.json"
NAMES = Path(__file__).parents[2] / "unit" / "metric_names.txt"


# ------------------------------------------------------------------ the processes
@dataclass
class Controller:
    """A central process started from a rendered workload, listening on loopback ports."""

    child: Child
    metrics_port: int
    health_port: int

    def log(self) -> str:
        return tail(self.child.log_path, 80)


@dataclass(frozen=True)
class World:
    artifacts: Path
    ca_file: Path  # the CA of the manager's serving certificate (--metrics-cert-dir)
    tokens: dict[str, str]  # ServiceAccount -> TokenRequest token
    scrapes: dict[str, str]  # process -> its /metrics text
    manager: Controller  # still running, for Prometheus


def https_get(port: int, path: str, token: str, ca_file: Path | None = None) -> tuple[int, str]:
    """GET https://127.0.0.1:<port><path> with a bearer token; the certificate is checked
    against `ca_file`, or not at all (the controllers' self-signed one)."""
    context = ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
    if ca_file is None:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start(world_dir: Path, rel: Release, name: str, kubeconfig: Path, node: str,
          *extra: str) -> Controller:  # fmt: skip
    """The release's container of `name`, as podrun starts it, on free loopback ports; its log
    is <program>.log."""
    container = pod_container(component(rel.objects, name))
    env = container_env(container, PodFields(rel.namespace, f"{name}-0", node))
    ports = {flag: free_port() for flag in LISTEN_FLAGS}
    argv = [f"--{f}=127.0.0.1:{ports[f]}" if (f := a[2:].split("=", 1)[0]) in ports else a
            for a in argv_of(container, env)]  # fmt: skip
    argv = [a for a in argv if not a.startswith("--metrics-cert-dir=")]
    argv += [f"--kubeconfig={kubeconfig}", *extra]
    program = Path(argv[0]).name
    child = spawn(program, argv, world_dir / f"{program}.log", env={"PATH": "/usr/bin:/bin", **env})
    used = {f for f in ports if any(a.startswith(f"--{f}=") for a in argv)}
    health = "health-probe-bind-address" if "health-probe-bind-address" in used else (
        "webserver-bind-address")  # fmt: skip
    return Controller(child, ports["metrics-bind-address"], ports[health])


def scraped(controller: Controller, token: str, wanted: tuple[str, ...],
            ca_file: Path | None = None) -> str:  # fmt: skip
    """The controller's /metrics once it leads its Lease and has a sample of every name in
    `wanted`."""

    def ready() -> str | None:
        if controller.child.exited() is not None:
            raise AssertionError(f"exited {controller.child.exited()}:\n{controller.log()}")
        status, body = https_get(controller.metrics_port, "/metrics", token, ca_file)
        have = mon.sample_names(body) if status == 200 else set()
        return body if status == 200 and set(wanted) <= have and leading(body) else None

    return eventually(ready, timeout=SETTLE, interval=0.5,
                      message=f"{controller.child.name}: samples of {wanted}")  # fmt: skip


def leading(body: str) -> bool:
    return any(line.startswith("leader_election_master_status{") and line.endswith(" 1.0")
               for line in body.splitlines())  # fmt: skip


def rendered(helm: Helm, release: str, namespace: str, labels: dict[str, str],
             values: dict[str, Any]) -> Release:  # fmt: skip
    reader = {"metrics": {"reader": {"serviceAccount": {"name": READER}}}}
    return render(helm, release=release, namespace=namespace, labels=labels,
                  kube_version=pinned_kube_version(), values={**reader, **values})  # fmt: skip


def serving_cert(directory: Path) -> Path:
    """tls.crt/tls.key for 127.0.0.1 in `directory` (what a certSecret mounts); its CA's path."""
    now = datetime.now(UTC)
    ca = pki.new_ca("local-ccm-test-metrics-ca", now)
    leaf = pki.issue_serving(ca, now)
    directory.mkdir(mode=0o700)
    (directory / "tls.crt").write_bytes(leaf.cert_pem)
    (directory / "tls.key").write_bytes(leaf.key_pem)
    (directory.parent / "metrics-ca.crt").write_bytes(ca.cert_pem)
    return directory.parent / "metrics-ca.crt"


def the_objects(kube: Client, namespace: str, node: str, labels: dict[str, str],
                sushy: SushyEmulator) -> None:  # fmt: skip
    """What every controller reports on: a pool for the Node, a LoadBalancer pool with a
    Service, a CSR the approver denies, the Node's BMC (its Secret in the release namespace,
    node-bmc's credentials namespace in the chart)."""
    kube.create(r.CLUSTER_CIDRS, cluster_cidr(f"{namespace}-pods", labels, bits=8,
                                              ipv4="10.99.0.0/16", sel=labels))  # fmt: skip
    space = lb.Space(kube, namespace, namespace)
    space.pool([f"{lb.block()}.0/28"])
    space.service("web")
    pem = csrs.request_pem(node, ips=["192.0.2.10"])
    kube.create(CSRS, csrs.csr_object(f"{namespace}-serving", pem))
    bmc.secret(kube, namespace, "bmc", sushy.username, sushy.password)
    bmc.nodebmc(kube, node, sushy.add_system(node), "bmc", caBundle=sushy.ca_pem)


@pytest.fixture(scope="module")
def world(
    request: pytest.FixtureRequest, *, binaries: Binaries, chart_helm: Helm,
    shipped_agent_rbac: ShippedRbac, netns_session: NetnsSession, sushy: SushyEmulator,
) -> Iterator[World]:  # fmt: skip
    state = run_state(request.config)
    labels = names.test_labels(state.run_id, request.node.nodeid)
    namespace = names.unique_name("monitoring", secrets.token_hex(3))
    artifacts = state.artifacts / names.test_id(request.node.nodeid)
    artifacts.mkdir(parents=True, exist_ok=True)
    net = NetnsFactory(netns_session)
    with contextlib.ExitStack() as stack:
        stack.callback(net.cleanup)
        plane = stack.enter_context(dedicated_plane(request.config, binaries, "monitoring"))
        kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="monitoring-test")
        stack.callback(kube.close)
        track = Tracker(kube, state.run_id)  # the plane goes with the module: never cleaned
        crds.install(kube, (*crds.CRD_FILES, bmc.CRD_FILE))
        kube.create(
            r.NAMESPACES,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": {**labels, "lbtest": namespace}},
            },
        )
        tokens = {}
        for sa in (READER, STRANGER):
            kube.create(
                r.SERVICE_ACCOUNTS,
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}},
                namespace=namespace,
            )
            tokens[sa] = token_of(kube, namespace, sa)
        scrapes: dict[str, str] = {}

        # the agent, until it initialised its Node
        node = NodeFactory(kube, track, labels, "monitoring")(uninitialized=True)["metadata"][
            "name"
        ]
        agent = agent_for_node(plane, kube, track, rbac=shipped_agent_rbac, namespace=namespace,
                               node=node, netns=a01_network(net).name, argv=[*A01_ARGS, *FAST],
                               log_path=artifacts / "agent.log", labels=labels)  # fmt: skip
        with agent:
            agent.wait_ready(timeout=30)
            eventually(lambda: initialised(kube, node), timeout=20, message="initialised")
            scrapes["local-ccm"] = agent.http_get(METRICS_PORT, "/metrics").body
        the_objects(kube, namespace, node, labels, sushy)

        # the standalone controllers, each until it leads and reports
        alone = rendered(chart_helm, "mon-alone", namespace, labels, {
            "agent": {"enabled": False},
            "nodeIpamController": {"enabled": True, "installCRDs": False}})  # fmt: skip
        apply_identity(plane, track, alone)
        for name, wanted in ((LIFECYCLE, ("local_ccm_lifecycle_managed_nodes",)),
                             (IPAM, ("local_ccm_ipam_free_cidrs",))):  # fmt: skip
            account = component(alone.objects, name)["spec"]["template"]["spec"]
            config = plane.token_kubeconfig(account["serviceAccountName"], namespace)
            controller = start(artifacts, alone, name, config, node)
            try:
                scrapes[name] = scraped(controller, tokens[READER], wanted)
            finally:
                controller.child.stop()
            assert "Traceback" not in controller.log(), controller.log()

        # the manager with all five controllers, left running for Prometheus
        managed = rendered(chart_helm, "mon-manager", namespace, labels, {
            "agent": {"enabled": False},
            "nodeLifecycleController": {"metrics": {"certSecret": CERT_SECRET}},
            "nodeIpamController": {"enabled": True, "installCRDs": False},
            "controllerManager": {"enabled": True, "kubeletServingApprover": {"enabled": True},
                                  "loadBalancer": {"enabled": True, "installCRDs": False},
                                  "bmc": {"enabled": True, "installCRDs": False}},
        })  # fmt: skip
        apply_identity(plane, track, managed)
        ca_file = serving_cert(artifacts / "metrics-cert")
        account = component(managed.objects, LIFECYCLE)["spec"]["template"]["spec"]
        config = plane.token_kubeconfig(account["serviceAccountName"], namespace)
        manager = start(artifacts, managed, LIFECYCLE, config, node,
                        f"--metrics-cert-dir={artifacts / 'metrics-cert'}")  # fmt: skip
        stack.callback(manager.child.stop)
        everything = (
            "local_ccm_ipam_free_cidrs",
            "local_ccm_lb_pool_addresses",
            "local_ccm_csr_decisions_total",
            "local_ccm_lifecycle_managed_nodes",
            "local_ccm_bmc_redfish_request_duration_seconds_bucket",
        )
        scrapes[MANAGER] = scraped(manager, tokens[READER], everything, ca_file)
        yield World(artifacts, ca_file, tokens, scrapes, manager)
        assert "Traceback" not in manager.log(), manager.log()


def token_of(kube: Client, namespace: str, account: str) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}}  # fmt: skip
    made: Obj = kube.create(r.SERVICE_ACCOUNTS, body, namespace=namespace, name=account,
                            subresource="token")  # fmt: skip
    return str(made["status"]["token"])


# ------------------------------------------------------------------ promtool
@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure(["promtool"]).path("promtool")


def check_metrics(promtool: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_promtool_finds_nothing_in_any_live_scrape(world: World, promtool: Path) -> None:
    assert set(world.scrapes) == {"local-ccm", LIFECYCLE, IPAM, MANAGER}
    for process, text in world.scrapes.items():
        done = check_metrics(promtool, text)
        assert (done.returncode, done.stdout + done.stderr) == (0, ""), process


def test_promtool_catches_a_counter_without_total(promtool: Path) -> None:
    """The lint can fail: the same check on a counter named as this project never does."""
    bad = "# HELP local_ccm_lb_writes Writes\n# TYPE local_ccm_lb_writes counter\n"
    done = check_metrics(promtool, bad + "local_ccm_lb_writes 1\n")
    assert done.returncode != 0
    assert 'counter metrics should have "_total" suffix' in done.stdout + done.stderr


def test_every_family_is_ours_or_a_generic_one(world: World) -> None:
    for process, text in world.scrapes.items():
        found = mon.families(text)
        assert found, process
        assert mon.foreign(list(found)) == [], process
        assert any(n.startswith(mon.PRODUCT_PREFIX) for n in found), process


def test_every_live_family_is_listed_in_metric_names(world: World) -> None:
    """tests/unit/metric_names.txt lists every family (counters without `_total`) but the
    process and Python ones: one a process exposes and the list lacks is undocumented."""
    listed = {line.split()[0] for line in NAMES.read_text().splitlines()}
    for process, text in world.scrapes.items():
        found = {name.removesuffix("_total") if kind == "counter" else name
                 for name, kind in mon.families(text).items()
                 if not name.startswith(("process_", "python_"))}  # fmt: skip
        assert sorted(found - listed) == [], process


def test_every_series_the_alerts_read_is_in_a_live_scrape(world: World, chart_helm: Helm) -> None:
    objs = parse(
        chart_helm.template(
            kube_version=pinned_kube_version(),
            set_values={"monitoring.prometheusRule.enabled": "true"},
        )
    )
    [rule] = [o for o in objs if o["kind"] == "PrometheusRule"]
    used = {
        n for g in rule["spec"]["groups"] for x in g["rules"] for n in mon.metric_names(x["expr"])
    }
    assert len(used) >= 6, used
    assert mon.missing_names(used, world.scrapes) == []


# ------------------------------------------------------------------ the dashboard
def dashboard_of(chart_helm: Helm) -> dict[str, Any]:
    objs = parse(
        chart_helm.template(
            kube_version=pinned_kube_version(), set_values={"monitoring.dashboard.enabled": "true"}
        )
    )
    [config_map] = [o for o in objs if o["kind"] == "ConfigMap" and
                    o["metadata"]["name"].endswith("-dashboard")]  # fmt: skip
    [text] = config_map["data"].values()
    board: dict[str, Any] = json.loads(text)
    return board


def test_every_series_the_dashboard_reads_is_in_a_live_scrape(
    world: World, chart_helm: Helm
) -> None:
    board = dashboard_of(chart_helm)
    found = mon.queries(board) + mon.variable_queries(board)
    for query in found:
        assert mon.metric_names(query.expr), query
    used = {n for q in found for n in mon.metric_names(q.expr)}
    assert mon.missing_names(used, world.scrapes) == []


# ------------------------------------------------------------------ Prometheus
def api(port: int, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}{query}", timeout=10) as answer:
        return json.loads(answer.read())["data"]


@pytest.mark.timeout(120)
def test_prometheus_scrapes_the_secure_metrics_with_the_metrics_reader_token(
    world: World, tmp_path: Path
) -> None:
    prometheus = ensure(["prometheus"]).path("prometheus")
    target = f"127.0.0.1:{world.manager.metrics_port}"
    jobs = []
    for job, account in (("local-ccm", READER), ("local-ccm-unbound", STRANGER)):
        token = tmp_path / f"{account}.token"
        token.write_text(world.tokens[account])
        jobs.append(mon.ScrapeJob(job, target, token, world.ca_file))
    (tmp_path / "prometheus.yml").write_text(mon.prometheus_config(jobs))
    port = free_port()
    argv = [
        str(prometheus),
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    child = spawn("prometheus", argv, world.artifacts / "prometheus.log")
    try:

        def up(job: str) -> float | None:
            result = api(port, "/api/v1/query", query=f'up{{job="{job}"}}')["result"]
            return float(result[0]["value"][1]) if result else None

        eventually(lambda: up("local-ccm") == 1.0, timeout=60, interval=0.5,
                          message="up{job=local-ccm} == 1")  # fmt: skip
        series = 'local_ccm_build_info{job="local-ccm"}'
        assert eventually(lambda: api(port, "/api/v1/query", query=series)["result"],
                          timeout=30, interval=0.5, message=series)  # fmt: skip
        eventually(lambda: up("local-ccm-unbound") == 0.0, timeout=30, interval=0.5,
                          message="up{job=local-ccm-unbound} == 0")  # fmt: skip
        targets = api(port, "/api/v1/targets")["activeTargets"]
        state = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}
        assert state["local-ccm"] == ("up", ""), state
        health, error = state["local-ccm-unbound"]
        assert health == "down", state
        assert "403" in error, state
    finally:
        child.stop()
    assert world.manager.child.exited() is None, world.manager.log()
