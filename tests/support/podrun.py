"""Start this project's real binary exactly as a rendered (or applied) workload's container
would: its command, its args with Kubernetes' ``$(VAR)`` expansion, and its environment, with the
downward-API fields a kubelet would fill in. No kubelet runs in the tests, so this is how a test
proves that a Pod spec is *runnable*: the process parses every flag, serves ``/healthz`` on the
port the liveness probe names, and exits 0 on SIGTERM.

The container's ``/usr/local/bin/<program>`` becomes the same program of the test venv; the one
addition is ``--kubeconfig`` (the Pod would use its in-cluster ServiceAccount token instead).
"""

from __future__ import annotations

import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import Child, spawn, tail

Obj = dict[str, Any]
PROGRAMS = ("local-ccm", "node-lifecycle-controller", "node-ipam-controller",
            "local-ccm-controller-manager")  # fmt: skip
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


@dataclass(frozen=True)
class PodFields:
    """What the kubelet's downward API would give the container."""

    namespace: str
    name: str
    node_name: str

    def field(self, path: str) -> str:
        fields = {
            "metadata.namespace": self.namespace,
            "metadata.name": self.name,
            "spec.nodeName": self.node_name,
        }
        if path not in fields:
            raise AssertionError(f"fieldRef {path} is not filled in by this harness")
        return fields[path]


def pod_container(workload: Obj) -> Obj:
    containers: list[Obj] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, [c["name"] for c in containers]
    return containers[0]


def container_env(container: Obj, fields: PodFields) -> dict[str, str]:
    """The container's ``env`` as the kubelet resolves it (values and downward-API fields; a
    later entry may use ``$(EARLIER)``)."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = fields.field(item["valueFrom"]["fieldRef"]["fieldPath"])
        else:
            raise AssertionError(f"env {item['name']}: only value and fieldRef are supported")
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a defined variable is replaced, an undefined reference
    stays as written, ``$$`` is a literal ``$``."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR.sub(one, text)


def local_program(command: str) -> Path:
    """The test venv's copy of the image's ``/usr/local/bin/<program>``."""
    name = Path(command).name
    assert command == f"/usr/local/bin/{name}", command
    assert name in PROGRAMS, command
    path = Path(sys.executable).parent / name
    assert path.is_file(), f"{path} missing: run `make setup`"
    return path


def health_port(container: Obj) -> int:
    """The port of the liveness probe (a named port is looked up in ``ports``)."""
    port = container["livenessProbe"]["httpGet"]["port"]
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    return int(named[port])


def argv_of(container: Obj, env: Mapping[str, str]) -> list[str]:
    """command + args, expanded; exactly one command entry (the program)."""
    command = list(container["command"])
    assert len(command) == 1, command
    args = [expand(a, env) for a in container.get("args", [])]
    unresolved = [a for a in args if _VAR.search(a)]
    assert not unresolved, f"references the container env does not define: {unresolved}"
    return [str(local_program(command[0])), *args]


@dataclass(frozen=True)
class Outcome:
    healthy: bool
    exit_code: int | None
    log: str


def run_container(
    workload: Obj,
    *,
    fields: PodFields,
    kubeconfig: Path,
    log_path: Path,
    timeout: float = 30.0,
) -> Outcome:
    """Start the workload's container program, wait for ``/healthz`` 200 (or for the process to
    exit), then SIGTERM it and report whether it was healthy and its exit code."""
    container = pod_container(workload)
    env = container_env(container, fields)
    argv = [*argv_of(container, env), f"--kubeconfig={kubeconfig}"]
    child = spawn(Path(argv[0]).name, argv, log_path, env={"PATH": "/usr/bin:/bin", **env})
    try:
        healthy = _wait_healthy(child, health_port(container), timeout)
    finally:
        child.stop()
    return Outcome(healthy, child.exited(), tail(log_path, 80))


def _wait_healthy(child: Child, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.exited() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False
