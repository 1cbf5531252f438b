"""The real ``local-ccm`` binary as a separate process inside a test namespace (pattern 1 in
docs/testing.md), as uid 65532 with no capability.

The process runs under ``ip netns exec <ns> setpriv --reuid=65532 --regid=65532 --clear-groups``
with every capability set emptied, so it sees exactly what a Node's hostNetwork pod would see and
has no privilege at all. It reaches the test apiserver through a :class:`LoopbackRelay` listening
on ``127.0.0.1:<apiserver port>`` inside the namespace, with a ServiceAccount token minted by
TokenRequest and bound to a Pod whose ``spec.nodeName`` is the test Node, under the
RBAC the chart ships for the agent (rendered once per session by the
``shipped_agent_rbac`` fixture, never a hand-written copy that could drift from the chart). Its
output goes to the test's artifacts directory; teardown is SIGTERM, then SIGKILL.

Its HTTP endpoints listen on the namespace's loopback; :meth:`AgentProcess.http_get` reaches
them with a socket created inside the namespace (a socket keeps the namespace it was made in).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import yaml
from prometheus_client.parser import text_string_to_metric_families

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Conflict
from local_ccm.netlink.netns import run_in_netns
from tests.support import pki
from tests.support import resources as r
from tests.support.chart import RbacTarget, ShippedRbac
from tests.support.cleanup import Tracker
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

AGENT_UID = 65532
BINARY = Path(sys.executable).parent / "local-ccm"
SERVICE_ACCOUNT = "local-ccm"
METRICS_PORT = 8092  # the agent's defaults: each namespace has its own loopback
HEALTH_PORT = 8093
STOP_GRACE = 10.0
# No capability in any set (A28); pdeathsig is set by this inner
# setpriv after the uid change (a credential change clears it), so the agent dies with pytest.
UNPRIVILEGED = (
    "setpriv",
    f"--reuid={AGENT_UID}",
    f"--regid={AGENT_UID}",
    "--clear-groups",
    "--inh-caps=-all",
    "--ambient-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
    "--pdeathsig=TERM",
    "--",
)


# ------------------------------------------------------------------ identity
RESOURCES: Mapping[str, r.Resource] = {
    "ServiceAccount": r.SERVICE_ACCOUNTS,
    "ClusterRole": r.CLUSTER_ROLES,
    "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS,
    "Role": r.ROLES,
    "RoleBinding": r.ROLE_BINDINGS,
}


def agent_rbac_for_test(
    rbac: ShippedRbac, name: str, namespace: str, labels: Mapping[str, str]
) -> list[tuple[r.Resource, Obj]]:
    """The chart's agent ServiceAccount, ClusterRole(+Binding) and events Role(+Binding),
    the roles named after ``name``, the ServiceAccount
    ``SERVICE_ACCOUNT`` in ``namespace``."""
    target = RbacTarget(name, SERVICE_ACCOUNT, namespace, labels)
    return [(RESOURCES[o["kind"]], o) for o in rbac.for_test(target)]


def bound_pod(name: str, namespace: str, node: str, labels: Mapping[str, str]) -> Obj:
    """A Pod on ``node`` using the agent's ServiceAccount; nothing ever runs it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "nodeName": node,
            "serviceAccountName": SERVICE_ACCOUNT,
            "automountServiceAccountToken": False,
            "containers": [{"name": "agent", "image": "local-ccm.invalid/agent:test"}],
        },
    }


@dataclass(frozen=True)
class AgentIdentity:
    """What the agent authenticates with: its namespace, ServiceAccount and bound Pod."""

    namespace: str
    pod: str


def create_agent_identity(
    kube: Client,
    track: Tracker,
    *,
    rbac: ShippedRbac,
    name: str,
    namespace: str,
    node: str,
    labels: Mapping[str, str],
) -> AgentIdentity:
    """Apply the chart's agent RBAC (``rbac``, the ``shipped_agent_rbac`` fixture) for
    ``namespace`` and create the Pod its token is bound to."""
    for res, body in agent_rbac_for_test(rbac, name, namespace, labels):
        meta = body["metadata"]
        try:
            kube.create(res, body, namespace=meta.get("namespace"))
        except Conflict:  # a second agent for the same Node in the same test
            continue
        if not res.namespaced or meta.get("namespace") != namespace:
            track(res, meta["name"], meta.get("namespace"))
    pod = f"{name[:50]}-p{secrets.token_hex(2)}"
    kube.create(r.PODS, bound_pod(pod, namespace, node, labels), namespace=namespace)
    return AgentIdentity(namespace, pod)


def add_bound_pod(
    kube: Client, identity: AgentIdentity, node: str, labels: Mapping[str, str]
) -> AgentIdentity:
    """Another Pod of the agent's ServiceAccount on ``node`` (token rotation, A31)."""
    pod = f"{identity.pod[:50]}-{secrets.token_hex(2)}"
    kube.create(
        r.PODS, bound_pod(pod, identity.namespace, node, labels), namespace=identity.namespace
    )
    return AgentIdentity(identity.namespace, pod)


def request_token(kube: Client, identity: AgentIdentity, expiration: int = 3600) -> str:
    """TokenRequest bound to the identity's Pod: the token carries the node-name claim."""
    pod = kube.get(r.PODS, identity.pod, namespace=identity.namespace)
    ref = {"kind": "Pod", "apiVersion": "v1", "name": identity.pod, "uid": pod["metadata"]["uid"]}
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": expiration, "boundObjectRef": ref},
    }
    made = kube.create(
        r.SERVICE_ACCOUNTS,
        body,
        namespace=identity.namespace,
        name=SERVICE_ACCOUNT,
        subresource="token",
    )
    return str(made["status"]["token"])


# ------------------------------------------------------------------ files the agent reads
def private_dir(parent: Path) -> Path:
    """A 0700 directory owned by the agent's uid for its kubeconfig and token, under the
    test's artifacts directory (traversable by that uid; removed with a green run's artifacts;
    the tokens are for a throw-away cluster)."""
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"agent-home-{secrets.token_hex(3)}"
    path.mkdir(mode=0o700)
    os.chown(path, AGENT_UID, AGENT_UID)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` as a 0600 file owned by the agent's uid (atomically: rename)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(3)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chown(tmp, AGENT_UID, AGENT_UID)
    tmp.replace(path)
    return path


def agent_kubeconfig(
    directory: Path,
    api_url: str,
    ca_pem: bytes,
    *,
    token: str | None = None,
    token_file: Path | None = None,
) -> Path:
    """A kubeconfig readable by the agent's uid, with an embedded token or a ``tokenFile``."""
    user = "system:serviceaccount:local-ccm"
    doc = yaml.safe_load(pki.render_kubeconfig(api_url, ca_pem, user=user, token=token))
    if token_file is not None:
        doc["users"][0]["user"]["tokenFile"] = str(token_file)
    return write_private(directory / "kubeconfig", yaml.safe_dump(doc, sort_keys=False))


def copy_kubeconfig(directory: Path, source: Path) -> Path:
    """A copy of ``source`` (e.g. control_plane.token_kubeconfig(...)) the agent can read."""
    return write_private(directory / "kubeconfig", source.read_text())


# ------------------------------------------------------------------ the process
@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: str


class AgentProcess:
    """``with AgentProcess(ns, argv, kubeconfig=..., api_url=..., log_path=...) as agent:``.

    ``kubeconfig=None`` starts it without credentials (detect mode); ``env`` is the whole
    environment besides PATH and HOME (nothing is inherited from pytest).
    """

    def __init__(
        self,
        netns: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        kubeconfig: Path | None = None,
        api_url: str | None = None,
        env: Mapping[str, str] | None = None,
        relay: bool = True,
    ) -> None:
        self.netns, self.argv, self.log_path = netns, list(argv), log_path
        self.kubeconfig, self.api_url = kubeconfig, api_url
        self.extra_env = dict(env or {})
        self.want_relay = relay and api_url is not None
        self.relay: LoopbackRelay | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.home = private_dir(log_path.parent)
        #: argv put in front of the command, e.g. joining a cgroup (tests/support/cgroup.py);
        #: set it before start(). It must exec the rest, so the pid stays the agent's.
        self.prefix: tuple[str, ...] = ()

    # -------------------------------------------------------------- lifecycle
    def command(self) -> list[str]:
        command = ["ip", "netns", "exec", self.netns, *UNPRIVILEGED, str(BINARY), *self.argv]
        return [*self.prefix, *command]

    def environment(self) -> dict[str, str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return {**env, **self.extra_env}

    def start(self) -> AgentProcess:
        if self.want_relay:
            assert self.api_url is not None
            port = urlsplit(self.api_url).port
            assert port is not None
            self.relay = LoopbackRelay(self.netns, ("127.0.0.1", port))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"# {' '.join(self.command())}\n".encode())
            out.flush()
            # Started from the test's (main) thread: pdeathsig follows the spawning thread.
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                process_group=0,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait(self, timeout: float) -> int:
        assert self.proc is not None, "not started"
        return self.proc.wait(timeout=timeout)

    def signal(self, sig: signal.Signals) -> None:
        """Signal the agent itself (the exec chain keeps one pid)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, wait up to ``grace``, then SIGKILL the group; close the relay."""
        code: int | None = None
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        elif self.proc is not None:
            code = self.proc.returncode
        if self.relay is not None:
            self.relay.close()
            self.relay = None
        return code

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -------------------------------------------------------------- observing it
    def proc_status(self) -> dict[str, str]:
        """``/proc/<pid>/status`` as a dict (Uid, Gid, CapInh, CapPrm, CapEff, CapBnd, ...)."""
        lines = Path(f"/proc/{self.pid}/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    def http_get(self, port: int, path: str, timeout: float = 5.0) -> HttpResponse:
        """GET ``http://127.0.0.1:<port><path>`` inside the agent's namespace (HTTP/1.0)."""
        sock = run_in_netns(self.netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        with sock:
            sock.settimeout(timeout)
            sock.connect(("127.0.0.1", port))
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
            chunks = []
            while data := sock.recv(65536):
                chunks.append(data)
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        return HttpResponse(status, body.decode(errors="replace"))

    def metrics(
        self, port: int = METRICS_PORT
    ) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of ``/metrics``, keyed by (name, labels)."""
        text = self.http_get(port, "/metrics").body
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def metric(
        self, name: str, labels: Mapping[str, str] | None = None, port: int = METRICS_PORT
    ) -> float:
        """One sample (0 when absent)."""
        return self.metrics(port).get((name, frozenset((labels or {}).items())), 0.0)

    def metric_sum(self, name: str, port: int = METRICS_PORT, **match: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``match``."""
        return sum(
            value
            for (n, labels), value in self.metrics(port).items()
            if n == name and set(match.items()) <= labels
        )

    def wait_ready(self, timeout: float = 20.0, port: int = HEALTH_PORT) -> None:
        """Until ``/readyz`` answers 200 (the first pass completed against the API)."""

        def ready() -> bool:
            if self.exited() is not None:
                raise AssertionError(f"the agent exited with {self.exited()}:\n{self.log()}")
            return self.http_get(port, "/readyz").status == 200

        eventually(ready, timeout=timeout, interval=0.2, message=f"{self.log_path.name} ready")


@dataclass(frozen=True)
class Completed:
    code: int
    stdout: str
    stderr: str


def run_binary(
    netns: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    timeout: float = 60.0,
    kubeconfig: Path | None = None,
    api_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Completed:
    """Run the binary to completion (run-once, detect, invalid flags), stdout and stderr kept
    apart; both are also appended to ``log_path``."""
    agent = AgentProcess(
        netns, argv, log_path=log_path, kubeconfig=kubeconfig, api_url=api_url, env=env
    )
    if agent.want_relay:
        port = urlsplit(api_url or "").port
        assert port is not None, api_url
        agent.relay = LoopbackRelay(netns, ("127.0.0.1", port))
    try:
        done = subprocess.run(
            agent.command(),
            env=agent.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        if agent.relay is not None:
            agent.relay.close()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as log:
        log.write(f"# {' '.join(agent.command())}\n# exit {done.returncode}\n")
        log.write(f"# stdout:\n{done.stdout}# stderr:\n{done.stderr}")
    return Completed(done.returncode, done.stdout, done.stderr)


def agent_for_node(
    cp: Any,
    kube: Client,
    track: Tracker,
    *,
    rbac: ShippedRbac,
    namespace: str,
    node: str,
    netns: str,
    argv: Sequence[str],
    log_path: Path,
    labels: Mapping[str, str],
) -> AgentProcess:
    """An (unstarted) unprivileged agent for ``node`` with the shipped RBAC and a token bound
    to a Pod on ``node``; ``cp`` is the ControlPlane whose apiserver it talks to."""
    identity = create_agent_identity(
        kube,
        track,
        rbac=rbac,
        name=f"lccm-{node}"[:60],
        namespace=namespace,
        node=node,
        labels=labels,
    )
    source = cp.token_kubeconfig(SERVICE_ACCOUNT, namespace, bound_pod=identity.pod)
    home = private_dir(log_path.parent)
    return AgentProcess(
        netns,
        [f"--node-name={node}", *argv],
        log_path=log_path,
        kubeconfig=copy_kubeconfig(home, source),
        api_url=cp.api_url,
    )
