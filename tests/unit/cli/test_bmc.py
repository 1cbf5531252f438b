"""node-bmc's manager entry: its flags and their checks (exit 2 listing every problem), the
shared options it reads, and exactly the permissions it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from local_ccm import flags
from local_ccm.cli import bmc, managed, manager
from local_ccm.cli.central import Place
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.nodes import Access
from local_ccm.runtime import host
from tests.support.kubeconfigs import credentials_env

CLUSTER = ClusterConfig("https://127.0.0.1:1")  # never dialled


def load(*argv: str, env: dict[str, str] | None = None) -> bmc.BmcOptions:
    parsed = flags.parse(manager.manager_flags(), list(argv), env or {})
    assert isinstance(parsed, flags.Parsed)
    options = bmc.controller().load(parsed, ({}, (), ()))
    assert isinstance(options, managed.Managed)
    return options


def test_off_unless_named_with_its_defaults() -> None:
    defaults = {name: make().default_on for name, make in manager.CONTROLLERS.items()}
    assert "node-bmc" not in manager.select("*", defaults)
    assert manager.select("*,node-bmc", defaults)[-1] == "node-bmc"
    own = load().own
    assert (own.poll_interval, own.concurrent_polls, own.credentials_namespace) == (
        30.0, 10, "kube-system")  # fmt: skip
    assert own.backoff == (5.0, 300.0)


def test_flags_and_environment_are_read() -> None:
    own = load("--bmc-poll-interval=1m", "--bmc-concurrent-polls=3",
               "--bmc-credentials-namespace=bmc").own  # fmt: skip
    assert (own.poll_interval, own.concurrent_polls, own.credentials_namespace) == (60.0, 3, "bmc")
    env = {"BMC_POLL_INTERVAL": "5s", "BMC_CONCURRENT_POLLS": "20",
           "BMC_CREDENTIALS_NAMESPACE": "creds"}  # fmt: skip
    own = load(env=env).own
    assert (own.poll_interval, own.concurrent_polls, own.credentials_namespace) == (
        5.0, 20, "creds")  # fmt: skip


def test_the_start_up_line_shows_them() -> None:
    assert bmc.controller().fields(load()) == {
        "bmc-poll-interval": "30s", "bmc-concurrent-polls": 10,
        "bmc-credentials-namespace": "kube-system", "bmc-power-off-timeout": "2m0s",
    }  # fmt: skip


def test_bad_values_exit_2_listing_every_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--controllers=node-bmc", "--bmc-poll-interval=500ms", "--bmc-concurrent-polls=0",
            "--bmc-credentials-namespace=Not_A_Namespace"]  # fmt: skip
    assert manager.main(argv, credentials_env(tmp_path)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "invalid flag --bmc-poll-interval: must be at least 1s, got 500ms"
    assert err[1] == "invalid flag --bmc-concurrent-polls: must be at least 1, got 0"
    assert err[2].startswith("invalid flag --bmc-credentials-namespace: ")
    assert "DNS-1123 label" in err[2]
    assert len(err) == 4


def test_too_many_concurrent_polls_is_refused_even_when_the_controller_is_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert manager.main(["--controllers=node-lifecycle", "--bmc-concurrent-polls=5000"], {}) == 2
    assert "--bmc-concurrent-polls: must be at most 200, got 5000" in capsys.readouterr().err


def test_permissions_are_scoped_to_what_it_does() -> None:
    group = "bmc.local-ccm.io"
    assert bmc.permissions(load("--bmc-credentials-namespace=bmc", "--event-namespace=ev")) == [
        Access("list", "nodebmcs", group),
        Access("watch", "nodebmcs", group),
        Access("patch", "nodebmcs", group, subresource="status"),
        Access("list", "nodes"),  # its own Node watch when it runs alone
        Access("watch", "nodes"),
        Access("patch", "nodes"),
        Access("get", "secrets", namespace="bmc"),  # get only: no list, no watch
        Access("create", "events", namespace="ev"),
    ]


def test_the_unit_polls_with_as_many_workers_as_concurrent_polls_and_threads_to_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []
    real = host.kit_unit

    def kit_unit(*args: Any, **kw: Any) -> Any:
        seen.append(kw)
        made = args[3]()
        assert made.executor._max_workers >= kw["workers"]  # a thread for every poll
        return real(*args, **kw)

    monkeypatch.setattr(bmc, "kit_unit", kit_unit)
    options = load("--bmc-concurrent-polls=7", "--leader-elect=false")
    unit = bmc.build_unit(options, options.shared, Place(CLUSTER, "me"))
    assert unit.name == "node-bmc"
    assert (seen[0]["workers"], seen[0]["backoff"]) == (7, (5.0, 300.0))
