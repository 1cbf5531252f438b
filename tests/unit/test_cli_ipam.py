"""`node-ipam-controller` entry point in-process: usage, exit 2 with every problem, the
IPAM_RESOURCE_LOCK rule in the logged configuration, exit 4 without credentials. Nothing here
reaches an API server: all of these end before."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm.cli.ipam import main as ipam_main

HELP_LINE = "run 'node-ipam-controller --help' for usage"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def no_credentials(tmp_path: Path) -> dict[str, str]:
    """An environment in which no kubeconfig exists (HOME is an empty directory)."""
    return {"HOME": str(tmp_path), "POD_NAMESPACE": "kube-system"}


def test_help_exits_0_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert ipam_main(["--help"], {}) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: node-ipam-controller")
    for flag in ("-cluster-cidr", "-leader-elect-retry-period", "IPAM_LEADER_ELECT_RETRY_PERIOD"):
        assert flag in out


def test_i36_invalid_flags_exit_2_one_line_per_problem(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    argv = ["--leader-elect-resource-lock=configmaps", "--cluster-cidr=10.0.0.0/8,10.1.0.0/16",
            "--node-cidr-mask-size-ipv4=40", "--bogus"]  # fmt: skip
    assert ipam_main(argv, no_credentials) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == HELP_LINE
    assert len(lines[:-1]) == 4, lines


def test_i36_ipam_resource_lock_as_retry_period_is_logged(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    code = ipam_main([], {**no_credentials, "IPAM_RESOURCE_LOCK": "3s"})
    err = capsys.readouterr().err
    assert code == 4  # no credentials: a start-up precondition
    assert "retry_period=3s" in err
    assert "WARNING" in err
    assert "IPAM_RESOURCE_LOCK is deprecated" in err


def test_i36_ipam_resource_lock_as_lock_type(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    ipam_main([], {**no_credentials, "IPAM_RESOURCE_LOCK": "leases"})
    err = capsys.readouterr().err
    assert "lock=leases" in err
    assert "WARNING" in err


def test_i36_ipam_resource_lock_garbage_exits_2(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    assert ipam_main([], {**no_credentials, "IPAM_RESOURCE_LOCK": "foo"}) == 2
    assert "IPAM_RESOURCE_LOCK" in capsys.readouterr().err


def test_no_credentials_exit_4(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    assert ipam_main([], no_credentials) == 4
    assert "no usable credentials" in capsys.readouterr().err


def test_an_unusable_metrics_cert_dir_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str], tmp_path: Path
) -> None:
    assert ipam_main([f"--metrics-cert-dir={tmp_path / 'none'}"], no_credentials) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "ERROR" in x]
    assert "cannot load tls.crt and tls.key" in line
