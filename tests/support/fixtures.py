"""pytest fixtures and hooks for the real control plane.

Loaded from tests/conftest.py through `pytest_plugins`. Per-run state lives in
`config.stash`, never in module globals.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import cpargs, names, tiers
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.cleanup import NodeFactory, Tracker, sweep_run
from tests.support.controlplane import ControlPlane, Options, artifacts_root, start_control_plane
from tests.support.gotool import BuildError
from tests.support.kcm import start_kcm
from tests.support.kwok import Kwok, start_kwok
from tests.support.processes import Child, StartupError, tail
from tests.support.recipes import APISERVER_POLICY_MINIMUM

log = logging.getLogger(__name__)
FIELD_MANAGER = "local-ccm-test"
# Fixtures starting a plane of another Kubernetes version (policy_minimum_plane: in
# tests/integration/deploy/conftest.py), and the binaries it runs: built or found with the others
# before the first test, never inside a test's timeout.
PLANE_FIXTURE_NEEDS = {"policy_minimum_plane": frozenset({"etcd", APISERVER_POLICY_MINIMUM})}


@dataclass
class RunState:
    """What one pytest process knows about its run."""

    run_id: str
    artifacts: Path
    keep_control_plane: bool
    binaries: Binaries | None = None
    control_plane: ControlPlane | None = None


STATE = pytest.StashKey[RunState]()


def run_state(config: pytest.Config) -> RunState:
    return config.stash[STATE]


def _write(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line)


# ------------------------------------------------------------------ hooks
def pytest_configure(config: pytest.Config) -> None:
    run_id = names.new_run_id(datetime.now(UTC), os.getpid())
    config.stash[STATE] = RunState(
        run_id=run_id,
        artifacts=artifacts_root(os.environ) / run_id,
        keep_control_plane=bool(config.getoption("--keep-control-plane")),
    )


def _item_needs(item: pytest.Item) -> set[str]:
    # The heaviest tier marker wins: an integration test marked `netns` too needs a plane.
    marked = [t for t in tiers.DEFAULT_TIMEOUT if item.get_closest_marker(t)]
    tier = marked[-1] if marked else None
    markers = {m.name for m in item.iter_markers()}
    fixtures = getattr(item, "fixturenames", ())
    extra = [PLANE_FIXTURE_NEEDS[f] for f in fixtures if f in PLANE_FIXTURE_NEEDS]
    return tiers.needed_components(tier, markers, fixtures).union(*extra)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Ensure binaries (and start the control plane) before any test, only if needed."""
    needs = set().union(*(_item_needs(i) for i in session.items)) if session.items else set()
    if not needs:
        return
    state = run_state(session.config)
    try:
        state.binaries = ensure(sorted(needs), report=lambda s: _write(session.config, s))
    except BuildError as exc:
        pytest.exit(f"control-plane binaries could not be built:\n{exc}", returncode=3)
    wants_plane = any("control_plane" in getattr(i, "fixturenames", ()) for i in session.items)
    if wants_plane:
        _start_plane(session.config, state)


def _start_plane(config: pytest.Config, state: RunState) -> ControlPlane:
    assert state.binaries is not None
    opts = Options(
        run_id=state.run_id,
        artifacts=state.artifacts,
        fallback_tmp=Path(tempfile.gettempdir()),
        keep=state.keep_control_plane,
    )
    try:
        cp = start_control_plane(state.binaries, opts)
    except (StartupError, OSError, RuntimeError) as exc:
        pytest.exit(f"the test control plane did not start:\n{exc}", returncode=3)
    state.control_plane = cp
    _write(config, f"kube-apiserver {cp.version} at {cp.api_url} (etcd {cp.etcd_url})")
    _write(config, f"admin kubeconfig: {cp.admin_kubeconfig}; logs: {cp.logs_dir}")
    _write(config, f"admission self-test: {cp.admission_self_test}")
    return cp


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach the control-plane and controller log tails to the report."""
    rep = yield
    state = run_state(item.config)
    if rep.failed and state.control_plane is not None:
        for name, text in state.control_plane.log_tails(40).items():
            rep.sections.append((f"{name} log (last 40 lines)", text))
        test_dir = state.artifacts / names.test_id(item.nodeid)
        for log_file in sorted(test_dir.glob("*.log")) if test_dir.is_dir() else ():
            rep.sections.append((f"{log_file.name} (last 40 lines)", tail(log_file, 40)))
    return rep


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Final sweep by run label, stop the plane, drop a green run's artifacts."""
    state = run_state(session.config)
    cp = state.control_plane
    if cp is not None and state.keep_control_plane:
        pids = ", ".join(f"{c.name}={c.pid}" for c in cp.children)
        _write(session.config, f"--keep-control-plane: KUBECONFIG={cp.admin_kubeconfig} ({pids})")
        return
    if cp is not None:
        try:
            with Client.from_kubeconfig(cp.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube:
                sweep_run(kube, state.run_id)
        except (ApiError, OSError) as exc:
            log.warning("final sweep failed: %s", exc)
        cp.stop()
    if exitstatus == 0 and not session.config.getoption("--keep-artifacts"):
        shutil.rmtree(state.artifacts, ignore_errors=True)
    elif state.artifacts.is_dir():
        _write(session.config, f"artifacts kept in {state.artifacts}")


# ------------------------------------------------------------------ session fixtures
@pytest.fixture(scope="session")
def binaries(request: pytest.FixtureRequest) -> Binaries:
    state = run_state(request.config)
    if state.binaries is None:
        state.binaries = ensure(["etcd", "kube-apiserver"])
    return state.binaries


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> ControlPlane:
    """etcd + kube-apiserver, started once per pytest process (before the first test)."""
    state = run_state(request.config)
    return state.control_plane or _start_plane(request.config, state)


@pytest.fixture(scope="session")
def kcm(control_plane: ControlPlane, binaries: Binaries) -> Iterator[Child]:
    """kube-controller-manager with the harmless controller set, on first request."""
    child = start_kcm(control_plane, binaries)
    yield child
    if not control_plane.options.keep:
        child.stop()


@pytest.fixture(scope="session")
def kwok(control_plane: ControlPlane, binaries: Binaries) -> Iterator[Kwok]:
    """kwok managing Nodes annotated kwok.x-k8s.io/node=fake."""
    started = start_kwok(control_plane, binaries)
    yield started
    if not control_plane.options.keep:
        started.child.stop()


@pytest.fixture(scope="module")
def node_lifecycle_plane(
    request: pytest.FixtureRequest, binaries: Binaries
) -> Iterator[ControlPlane]:
    """A second etcd + apiserver with KCM's node-lifecycle controllers, per module.

    Kept apart from the shared plane, where those controllers would mark every hand-made
    Node NotReady. Node leases must be renewed well within the 20 s grace period.
    """
    state = run_state(request.config)
    opts = Options(
        run_id=state.run_id,
        artifacts=state.artifacts,
        fallback_tmp=Path(tempfile.gettempdir()),
        plane=f"node-lifecycle-plane-{secrets.token_hex(3)}",
        keep=state.keep_control_plane,
    )
    plane = start_control_plane(binaries, opts)
    try:
        start_kcm(
            plane,
            binaries,
            controllers=cpargs.NODE_LIFECYCLE_CONTROLLERS,
            extra=cpargs.node_lifecycle_kcm_extra(),
        )
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def helm_binary(binaries: Binaries) -> Path:
    return binaries.path("helm")


@pytest.fixture(scope="session")
def cosign_binary(binaries: Binaries) -> Path:
    return binaries.path("cosign")


@pytest.fixture(scope="session")
def actionlint_binary(binaries: Binaries) -> Path:
    return binaries.path("actionlint")


# ------------------------------------------------------------------ per-test fixtures
@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Client]:
    """A fresh admin client from the admin kubeconfig, through the project's own REST layer."""
    client = Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    yield client
    client.close()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """`t-<slug of the test name>-<6 hex>`: a DNS-1123 label of at most 63 characters."""
    return names.unique_name(request.node.name, secrets.token_hex(3))


@pytest.fixture
def test_labels(request: pytest.FixtureRequest) -> dict[str, str]:
    return names.test_labels(run_state(request.config).run_id, request.node.nodeid)


@pytest.fixture
def test_artifacts(request: pytest.FixtureRequest) -> Path:
    """<artifacts>/<run-id>/<test-id>/: where controllers under test write their logs."""
    path = run_state(request.config).artifacts / names.test_id(request.node.nodeid)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def track(kube: Client, request: pytest.FixtureRequest) -> Iterator[Tracker]:
    """`track(res, name, namespace=None)`: delete at teardown, in reverse order."""
    tracker = Tracker(kube, run_state(request.config).run_id)
    yield tracker
    tracker.cleanup()


@pytest.fixture
def test_namespace(kube: Client, unique_name: str, test_labels: dict[str, str]) -> Iterator[str]:
    """A fresh namespace; deleted in the background at teardown, never waited for."""
    body = {"apiVersion": "v1", "kind": "Namespace"}
    kube.create(r.NAMESPACES, {**body, "metadata": {"name": unique_name, "labels": test_labels}})
    yield unique_name
    try:
        kube.delete(r.NAMESPACES, unique_name, propagation_policy="Background")
    except ApiError as exc:
        log.warning("deleting namespace %s: %s", unique_name, exc)


@pytest.fixture
def make_node(
    kube: Client, track: Tracker, test_labels: dict[str, str], request: pytest.FixtureRequest
) -> NodeFactory:
    """Node factory: create, then set status through the status subresource."""
    return NodeFactory(kube, track, test_labels, request.node.name)
