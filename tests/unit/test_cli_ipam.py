"""`node-ipam-controller` entry point in-process: usage, exit 2 with every problem, the
IPAM_RESOURCE_LOCK rule in the effective configuration, exit 2 without credentials. Nothing here
reaches an API server: all of these end before."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm import flags
from local_ccm.cli import central
from local_ccm.cli.ipam import controller, shared_of
from local_ccm.cli.ipam import main as ipam_main
from local_ccm.ipam.options import FLAGS, IpamOptions
from tests.support.kubeconfigs import unused_kubeconfig
from tests.support.options import load_ipam

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
    assert len(lines[:-1]) == 5, lines  # four flags, and the missing credentials
    assert lines[-2].startswith("no Kubernetes credentials: ")


def loaded(env: dict[str, str]) -> tuple[IpamOptions, dict[str, object]]:
    """The options and the start-up line's fields `env` gives."""
    entry = controller()
    fixed = central.fix_env(env, [entry])
    options = entry.load(flags.parse(FLAGS, [], fixed[0]), fixed)
    assert isinstance(options, IpamOptions), options
    return options, dict(entry.fields(options))


def test_i36_ipam_resource_lock_as_retry_period_is_logged(
    no_credentials: dict[str, str],
) -> None:
    options, fields = loaded({**no_credentials, "IPAM_RESOURCE_LOCK": "3s"})
    assert fields["retry_period"] == "3s"
    assert any("IPAM_RESOURCE_LOCK is deprecated" in w for w in options.warnings)


def test_i36_ipam_resource_lock_as_lock_type(no_credentials: dict[str, str]) -> None:
    options, fields = loaded({**no_credentials, "IPAM_RESOURCE_LOCK": "leases"})
    assert fields["lock"] == "leases"
    assert any("read as the lock type" in w for w in options.warnings)


def test_i36_ipam_resource_lock_garbage_exits_2(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    assert ipam_main([], {**no_credentials, "IPAM_RESOURCE_LOCK": "foo"}) == 2
    assert "IPAM_RESOURCE_LOCK" in capsys.readouterr().err


def test_no_credentials_exit_2(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str]
) -> None:
    assert ipam_main([], no_credentials) == 2
    assert "no Kubernetes credentials" in capsys.readouterr().err


def test_an_unusable_metrics_cert_dir_exits_2_before_start_up(
    capsys: pytest.CaptureFixture[str], no_credentials: dict[str, str], tmp_path: Path
) -> None:
    argv = [
        f"--metrics-cert-dir={tmp_path / 'none'}",
        f"--kubeconfig={unused_kubeconfig(tmp_path)}",
    ]
    assert ipam_main(argv, no_credentials) == 2
    err = capsys.readouterr().err
    assert "starting" not in err  # refused with the flags' problems, before the start line
    (line,) = [x for x in err.splitlines() if "metrics-cert-dir" in x]
    assert "cannot load tls.crt and tls.key" in line


def test_klog_flags_are_named_in_the_start_up_warning_as_in_the_other_binaries() -> None:
    """The process's settings carry the klog flags given, so `start_logging` warns that they
    are ignored (node-ipam-controller alone, or first in the manager)."""
    options = load_ipam(["--vmodule=x=2", "--logtostderr=false"], {"POD_NAMESPACE": "ns"})
    assert isinstance(options, IpamOptions), options
    assert shared_of(options).ignored_klog == ("vmodule", "logtostderr")
