"""node-ipam-controller as a subprocess of its real entry point, with the shipped RBAC."""

from __future__ import annotations

import string
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.cleanup import Tracker
from tests.support.processes import Child, free_port, spawn, tail
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[3]
RBAC_FILE = REPO / "tests" / "support" / "rbac" / "ipam.yaml"
BINARY = Path(sys.executable).parent / "node-ipam-controller"
SA = "node-ipam-controller"
KINDS = {
    "ServiceAccount": r.SERVICE_ACCOUNTS,
    "ClusterRole": r.CLUSTER_ROLES,
    "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS,
    "Role": r.ROLES,
    "RoleBinding": r.ROLE_BINDINGS,
}
# And a per-test event namespace so Events stay with the test. Plain metrics on the web server
# (upstream's layout), which `metric()` reads; tests/integration/test_metrics_auth.py covers the
# secure default.
BASE_FLAGS = ("--status-update-interval=1s", "--metrics-secure=false")


def apply_rbac(
    kube: Client,
    track: Tracker,
    labels: Mapping[str, str],
    *,
    name: str,
    namespace: str,
    lease_name: str,
    event_namespace: str,
) -> None:
    """Create every document of the shipped RBAC file, labelled and tracked."""
    text = string.Template(RBAC_FILE.read_text()).substitute(
        NAME=name, NAMESPACE=namespace, LEASE_NAME=lease_name, EVENT_NAMESPACE=event_namespace
    )
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        res = KINDS[doc["kind"]]
        doc["metadata"].setdefault("labels", {}).update(labels)
        ns = doc["metadata"].get("namespace")
        kube.create(res, doc, namespace=ns)
        track(res, doc["metadata"]["name"], ns)


@dataclass
class IpamProcess:
    """One running controller; `stop()` sends SIGTERM and returns the exit code."""

    child: Child
    port: int
    log_path: Path
    exit_code: int | None = field(default=None)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if self.child.exited() is not None:
                raise AssertionError(f"controller exited {self.child.exited()}: {self.log()}")
            return self.get("/readyz")[0] == 200

        eventually(ready, timeout=timeout, interval=0.2, message="controller /readyz 200")

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        status, text = self.get("/metrics")
        assert status == 200, text
        total, found = 0.0, False
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, raw = head.partition("{")
            if metric != name:
                continue
            have = dict(_labels(raw.rstrip("}")))
            if all(have.get(k) == v for k, v in (labels or {}).items()):
                total += float(value)
                found = True
        return total if found else 0.0

    def log(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def stop(self) -> int | None:
        if self.exit_code is None:
            self.child.stop(grace=15.0)
            self.exit_code = self.child.proc.returncode
        return self.exit_code


def _labels(raw: str) -> list[tuple[str, str]]:
    pairs = []
    for part in raw.split('",'):
        if "=" in part:
            key, _, value = part.partition("=")
            pairs.append((key.strip(), value.strip().strip('"')))
    return pairs


def start(
    args: Sequence[str],
    kubeconfig: Path,
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
) -> IpamProcess:
    port = free_port()
    argv = [
        str(BINARY),
        f"--kubeconfig={kubeconfig}",
        f"--health-probe-address=127.0.0.1:{port}",
        *BASE_FLAGS,
        *args,
    ]
    full_env: dict[str, Any] = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(kubeconfig)}
    full_env.update(env or {})
    child = spawn("node-ipam-controller", argv, log_path, env=full_env)
    return IpamProcess(child, port, log_path)
