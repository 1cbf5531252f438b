"""`node-lifecycle-controller` entry point: --help, exit 2 with every
problem, exit 2 without credentials; what it needs and what /readyz says meanwhile (the check
itself is tests/unit/runtime/test_access.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from local_ccm import __version__, flags
from local_ccm.cli.lifecycle import main, selected_nodes
from local_ccm.lifecycle.options import FLAGS, LifecycleOptions, options_from
from local_ccm.lifecycle.run import permissions
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.process import Status
from tests.fakes.clock import FakeClock
from tests.fakes.lifecycle import health_checks
from tests.support.kubeconfigs import unused_kubeconfig


def test_help_prints_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], {}) == 0
    out = capsys.readouterr().out
    assert "-not-ready-timeout" in out
    assert "-max-unhealthy" in out


def test_version_prints_the_package_version_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--version"], {}) == 0
    assert capsys.readouterr().out.startswith(f"node-lifecycle-controller {__version__} (python ")


def test_invalid_command_line_exits_2_listing_every_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--ping-count=-1", "--reconcile-interval=0", "--max-unhealthy=150%",
                 "--probe=udp:1", "--bogus"], {})  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    # five flags, and the credentials this environment lacks: all listed at once
    assert len([line for line in err if "--help" not in line]) == 6
    assert any(line.startswith("no Kubernetes credentials") for line in err)


def test_missing_credentials_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"HOME": str(tmp_path)}  # no kubeconfig anywhere, not in a cluster
    assert main(["--metrics-bind-address=0", "--health-probe-bind-address=0"], env) == 2
    assert "no Kubernetes credentials" in capsys.readouterr().err


def test_an_unusable_metrics_cert_dir_exits_2_before_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        f"--metrics-cert-dir={tmp_path / 'none'}",
        f"--kubeconfig={unused_kubeconfig(tmp_path)}",
    ]
    assert main(argv, {"HOME": str(tmp_path)}) == 2
    err = capsys.readouterr().err
    assert "starting" not in err  # refused with the flags' problems, before the start line
    (line,) = [x for x in err.splitlines() if "metrics-cert-dir" in x]
    assert f"--metrics-cert-dir={tmp_path / 'none'}: cannot load tls.crt and tls.key" in line


def test_out_of_service_needs_patch_and_volume_attachments() -> None:
    needed = {str(a) for a in accesses(permissions(event_namespace="e", out_of_service=True))}
    assert {"patch nodes", "list volumeattachments.storage.k8s.io"} <= needed
    assert not any("leases" in a for a in needed)


def test_readiness_names_the_wait_for_the_api_server_and_liveness_passes() -> None:
    clock = FakeClock()
    status = Status(waiting="waiting for the API server: connection refused",
                    last_tick=clock.monotonic())  # fmt: skip
    healthz, readyz = health_checks(status, clock)
    assert all(ok for _, ok, _ in healthz.run())
    failing = [(name, detail) for name, ok, detail in readyz.run() if not ok]
    assert failing == [("start-up", "waiting for the API server: connection refused")]
    status.waiting = None
    assert all(ok for _, ok, _ in readyz.run())


def test_no_usable_probe_fails_readiness_with_the_reason_and_liveness_passes() -> None:
    clock = FakeClock()
    problem = "no configured probe is usable, so every verdict is unknown ...: no NET_RAW"
    status = Status(last_tick=clock.monotonic())
    healthz, readyz = health_checks(status, clock, probe_problem=problem)
    assert all(ok for _, ok, _ in healthz.run())  # not a restart: a restart cannot fix it
    failing = [(name, detail) for name, ok, detail in readyz.run() if not ok]
    assert failing == [("probe", problem)]


def test_of_a_shared_node_watch_the_controller_sees_its_selector_only() -> None:
    def options(*argv: str) -> LifecycleOptions:
        loaded = options_from(flags.parse(FLAGS, list(argv), {}))
        assert isinstance(loaded, LifecycleOptions), loaded
        return loaded

    def node(**labels: str) -> dict[str, Any]:
        return {"metadata": {"name": "n", "labels": labels}}

    assert selected_nodes(options()) is None  # every Node, as its own watch would list
    matches = selected_nodes(options("--node-selector=pool=spot,zone!=a"))
    assert matches is not None
    assert matches(node(pool="spot", zone="b"))
    assert not matches(node(pool="spot", zone="a"))
    assert not matches({"metadata": {"name": "bare"}})
