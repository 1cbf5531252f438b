"""`node-lifecycle-controller` entry point: --help, exit 2 with every
problem, exit 4 without credentials; and the start-up access check."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from local_ccm import __version__
from local_ccm.kube import errors as ke
from local_ccm.lifecycle.main import check_access, main
from local_ccm.lifecycle.nodeapi import required_access
from local_ccm.lifecycle.process import Status, health_checks
from tests.fakes.clock import FakeClock
from tests.fakes.nodes import FakeNodeApi


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
    assert len([line for line in err if "--help" not in line]) == 5


def test_missing_credentials_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"HOME": str(tmp_path)}  # no kubeconfig anywhere, not in a cluster
    assert main(["--metrics-bind-address=0", "--health-probe-bind-address=0"], env) == 4
    assert "credentials" in capsys.readouterr().err


def test_an_unusable_metrics_cert_dir_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([f"--metrics-cert-dir={tmp_path / 'none'}"], {"HOME": str(tmp_path)}) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "ERROR" in x]
    assert f"--metrics-cert-dir={tmp_path / 'none'}: cannot load tls.crt and tls.key" in line


def access_api(denied: set[str], *errors: ke.ApiError) -> FakeNodeApi:
    """Reviews raise `errors` first, then answer False for `denied`."""
    api = FakeNodeApi()
    api.denied, api.ssar_fail_next = denied, list(errors)
    return api


NEEDED = required_access(event_namespace="default", lease_namespace="kube-system",
                         lease_name="nlc", out_of_service=False)  # fmt: skip


def check(api: FakeNodeApi) -> str | None:
    return asyncio.run(check_access(api, NEEDED, asyncio.Event(), FakeClock()))


def test_missing_permissions_are_listed() -> None:
    problem = check(access_api({"delete nodes", "update leases.coordination.k8s.io/nlc in "
                                               "namespace kube-system"}))  # fmt: skip
    assert problem is not None
    assert "delete nodes" in problem
    assert "update leases.coordination.k8s.io/nlc" in problem


def test_rejected_credentials_are_a_precondition_failure() -> None:
    problem = check(access_api(set(), ke.Unauthorized(401, "Unauthorized", "bad token")))
    assert problem is not None
    assert "401" in problem


def test_all_permissions_present_passes() -> None:
    assert check(access_api(set())) is None


def test_out_of_service_needs_patch_and_volume_attachments() -> None:
    needed = {str(a) for a in required_access(event_namespace="e", lease_namespace="n",
                                               lease_name=None, out_of_service=True)}  # fmt: skip
    assert {"patch nodes", "list volumeattachments.storage.k8s.io"} <= needed
    assert not any("leases" in a for a in needed)


def test_transient_errors_are_retried_and_reported_until_the_api_answers() -> None:
    clock, seen = FakeClock(), list[str]()

    flaky = access_api(set(), *[ke.Transient(0, "StreamBroken", "connection refused")] * 5)

    async def scenario() -> str | None:
        check = asyncio.ensure_future(check_access(
            flaky, NEEDED, asyncio.Event(), clock, on_error=seen.append
        ))  # fmt: skip
        await clock.advance(600)  # far beyond a minute: no give-up
        return await check

    assert asyncio.run(scenario()) is None
    assert len(seen) == 5
    assert "connection refused" in seen[-1]


def test_readiness_names_the_wait_for_the_api_server_and_liveness_passes() -> None:
    clock = FakeClock()
    status = Status(waiting="waiting for the API server: connection refused",
                    last_tick=clock.monotonic())  # fmt: skip
    healthz, readyz = health_checks(status, clock, 1.0)
    assert all(ok for _, ok, _ in healthz.run())
    failing = [(name, detail) for name, ok, detail in readyz.run() if not ok]
    assert failing == [("start-up", "waiting for the API server: connection refused")]
    status.waiting = None
    assert all(ok for _, ok, _ in readyz.run())
