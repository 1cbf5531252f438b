"""`local-ccm` entry point, run in-process with argv, env, modes and credentials injected. The real
binary is exercised in
tests/netns/agent/test_detect_mode.py."""

from __future__ import annotations

import json
import logging
import platform
import re
from collections.abc import Iterator, Mapping

import pytest

from local_ccm import __version__
from local_ccm.agent.options import AgentOptions
from local_ccm.cli.agent import agent_main
from local_ccm.kube.config import ClusterConfig, ConfigError

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "192.0.2.1", "KUBERNETES_SERVICE_PORT": "6443"}
HELP_LINE = "run 'local-ccm --help' for usage"


def fake_resolve(kubeconfig: str, apiserver: str, env: Mapping[str, str]) -> ClusterConfig:
    if env.get("KUBERNETES_SERVICE_HOST"):
        return ClusterConfig(server="https://192.0.2.1:6443", source="fake")
    raise ConfigError("no Kubernetes configuration: not in a cluster")


class Recorder:
    """A mode (loop/run-once or detect) that records its options and returns ``code``."""

    def __init__(self, code: int = 0, error: Exception | None = None) -> None:
        self.code, self.error = code, error
        self.calls: list[AgentOptions] = []

    def __call__(self, options: AgentOptions) -> int:
        self.calls.append(options)
        if self.error is not None:
            raise self.error
        return self.code


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """agent_main configures the root logger; put it back after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def main(
    *argv: str,
    env: Mapping[str, str] = IN_CLUSTER,
    run: Recorder | None = None,
    detect: Recorder | None = None,
) -> int:
    return agent_main(
        list(argv), env, run=run or Recorder(), detect=detect or Recorder(), resolve=fake_resolve
    )


@pytest.mark.parametrize("flag", ["-h", "--help", "-help"])
def test_help_prints_usage_on_stdout_and_exits_0(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(flag) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Usage: local-ccm [detect] [flags]\n")
    assert "  -external-ip-target IPs\n" in out
    assert err == ""


def test_help_wins_over_other_problems(capsys: pytest.CaptureFixture[str]) -> None:
    assert main("--bogus", "--help") == 0
    assert capsys.readouterr().out.startswith("Usage: local-ccm")


def test_version_prints_version_and_python_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main("--version") == 0
    out, err = capsys.readouterr()
    assert out == f"local-ccm {__version__} (python {platform.python_version()})\n"
    assert re.fullmatch(r"local-ccm \S+ \(python \d+\.\d+\.\d+\)\n", out)
    assert err == ""


def test_invalid_command_line_lists_every_problem_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = Recorder()
    assert main("--remove-taint", "false", "--reconcile-interval=10", env={}, run=run) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        'unexpected argument "false" (use --remove-taint=false)',
        'invalid flag --reconcile-interval: missing unit in duration "10"; did you mean 10s?',
        "missing --node-name (or NODE_NAME)",
        "no Kubernetes credentials: not in a cluster",
        HELP_LINE,
    ]
    assert run.calls == []


def test_unexpanded_node_name_gets_its_dedicated_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main("--node-name=$(NODE_NAME)") == 2
    first, last = capsys.readouterr().err.splitlines()
    assert first.startswith('invalid flag --node-name: "$(NODE_NAME)" contains the unexpanded')
    assert last == HELP_LINE


def test_loop_mode_runs_the_agent_with_the_loaded_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, detect = Recorder(code=0), Recorder()
    assert main("--node-name=n1", "--v=2", run=run, detect=detect) == 0
    assert [o.node_name for o in run.calls] == ["n1"]
    assert run.calls[0].verbosity == 2
    assert detect.calls == []
    err = capsys.readouterr().err
    assert re.search(
        rf"INFO local_ccm.cli starting local-ccm {__version__} node=n1 mode=loop "
        r".*external_targets=8\.8\.8\.8 ",
        err,
    )


def test_run_once_mode_returns_the_run_exit_code() -> None:
    run = Recorder(code=1)
    assert main("--node-name=n1", "--run-once", run=run) == 1
    assert run.calls[0].mode == "run-once"


@pytest.mark.parametrize("argv", [("detect",), ("--detect-only",)])
def test_detect_mode_needs_no_cluster_and_returns_its_code(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    run, detect = Recorder(), Recorder(code=1)
    assert main(*argv, env={}, run=run, detect=detect) == 1
    assert detect.calls[0].detect
    assert run.calls == []
    assert capsys.readouterr().err == ""  # no start-up line in detect mode


def test_klog_flags_give_one_warning_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("detect", "--logtostderr", "--vmodule=x=2", "--logtostderr=false")
    assert main(*argv) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert " WARNING local_ccm.cli ignoring klog flags --logtostderr, --vmodule:" in lines[0]


def test_json_log_format_applies_to_the_startup_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main("--node-name=n1", "--log-format=json") == 0
    line = json.loads(capsys.readouterr().err.splitlines()[0])
    assert line["msg"] == f"starting local-ccm {__version__}"
    assert line["node"] == "n1"
    assert line["external_targets"] == "8.8.8.8"


def test_unexpected_error_exits_1_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = Recorder(error=RuntimeError("boom"))
    assert main("--node-name=n1", run=run) == 1
    err = capsys.readouterr().err
    assert "ERROR local_ccm.cli internal error: RuntimeError: boom" in err
    assert "Traceback" not in err
