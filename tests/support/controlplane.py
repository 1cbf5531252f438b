"""etcd + kube-apiserver (and optionally kube-controller-manager) for tests.

`python -m tests.support.controlplane dev` starts one for a person (`make dev-cluster`).
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from tests.support import cpargs, names, pki
from tests.support.adminhttp import AdminHttp
from tests.support.binaries import Binaries
from tests.support.processes import Child, StartupError, free_port, spawn, stop_all, tail
from tests.support.selftest import admission_self_test

log = logging.getLogger(__name__)
ETCD_READY_TIMEOUT = 30.0
APISERVER_READY_TIMEOUT = 90.0
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
MIN_SHM_FREE = 2 * 1024**3


@dataclass(frozen=True)
class Options:
    run_id: str
    artifacts: Path  # <artifacts>/<run-id>/
    fallback_tmp: Path  # used for the work directory when /dev/shm is small
    plane: str = "control-plane"  # log directory name; a second plane picks another
    keep: bool = False  # --keep-control-plane: children survive us, nothing is deleted
    scale: bool = False
    audit: bool = False
    # Which ensured kube-apiserver runs: the pinned newest one, or e.g.
    # recipes.APISERVER_POLICY_MINIMUM for the admission policy's oldest version.
    apiserver: str = "kube-apiserver"


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver. `children` grows as kcm/kwok are adopted."""

    api_url: str
    etcd_url: str
    ca_pem: bytes
    version: str
    workdir: Path
    logs_dir: Path
    admin_kubeconfig: Path
    admission_self_test: str
    http: AdminHttp
    options: Options
    pki: pki.Pki
    children: list[Child] = field(default_factory=list)
    stopped: bool = False

    def adopt(self, child: Child) -> None:
        """Stop `child` with the plane, before the apiserver (reverse start order)."""
        self.children.append(child)

    def user_kubeconfig(self, name: str, groups: Sequence[str]) -> Path:
        """A kubeconfig authenticating as user `name` in `groups` (a client certificate)."""
        client = pki.issue_client(self.pki.client_ca, name, groups, datetime.now(UTC))
        text = pki.render_kubeconfig(self.api_url, self.ca_pem, user=name, client=client)
        return pki.write_kubeconfig(self._user_path(name), text)

    def token_kubeconfig(
        self, sa: str, namespace: str, *, bound_pod: str | None = None, expiration: int = 3600
    ) -> Path:
        """A kubeconfig with a TokenRequest token of ServiceAccount `namespace/sa`."""
        spec: dict[str, Any] = {"expirationSeconds": expiration}
        if bound_pod is not None:
            pod = self.http.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{bound_pod}")
            ref = {"kind": "Pod", "apiVersion": "v1", "name": bound_pod}
            spec["boundObjectRef"] = {**ref, "uid": pod["metadata"]["uid"]}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token"
        token = self.http.ok("POST", path, body)["status"]["token"]
        user = f"system:serviceaccount:{namespace}:{sa}"
        text = pki.render_kubeconfig(self.api_url, self.ca_pem, user=user, token=token)
        return pki.write_kubeconfig(self._user_path(f"sa-{namespace}-{sa}"), text)

    def _user_path(self, name: str) -> Path:
        return self.workdir / "users" / f"{names.slug(name, 40)}-{secrets.token_hex(3)}.kubeconfig"

    def log_tails(self, lines: int = 40) -> dict[str, str]:
        return {c.name: tail(c.log_path, lines) for c in self.children}

    def stop(self) -> None:
        """Stop everything in reverse start order and drop the etcd data (unless kept)."""
        if self.stopped or self.options.keep:
            return
        self.stopped = True
        stop_all(self.children)
        shutil.rmtree(self.workdir, ignore_errors=True)


def artifacts_root(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("LOCAL_CCM_TEST_ARTIFACTS") or "test-artifacts").resolve()


def _workdir(opts: Options, attempt: int) -> Path:
    name = f"local-ccm-test-{opts.run_id}-{opts.plane}-{attempt}"
    shm = Path("/dev/shm")
    # etcd's history lives here until compaction: prefer tmpfs, fall back when it is small.
    base = (
        shm if shm.is_dir() and shutil.disk_usage(shm).free >= MIN_SHM_FREE else opts.fallback_tmp
    )
    path = base / name
    path.mkdir(mode=0o700, parents=True)
    return path


def start_control_plane(binaries: Binaries, opts: Options) -> ControlPlane:
    """Start etcd and kube-apiserver and check them; retry once on a port race."""
    for attempt in (1, 2):
        try:
            return _start_once(binaries, opts, attempt)
        except StartupError as exc:
            if attempt == 2 or "address already in use" not in str(exc):
                raise
            log.warning("port race during start-up, retrying once: %s", str(exc)[:200])
    raise AssertionError("unreachable")


def _start_once(binaries: Binaries, opts: Options, attempt: int) -> ControlPlane:
    workdir = _workdir(opts, attempt)
    logs = opts.artifacts / opts.plane
    logs.mkdir(parents=True, exist_ok=True)
    material = pki.generate_pki(datetime.now(UTC))
    files = pki.write_pki(material, workdir / "pki")
    children: list[Child] = []
    try:
        etcd = cpargs.EtcdSettings(workdir / "etcd", free_port(), free_port(), opts.scale)
        children.append(_spawn(opts, "etcd", cpargs.etcd_args(binaries.path("etcd"), etcd), logs))
        _wait_etcd(children[0], etcd.client_url)
        settings = _apiserver_settings(opts, etcd.client_url, files, logs)
        args = cpargs.apiserver_args(binaries.path(opts.apiserver), settings)
        children.append(_spawn(opts, "kube-apiserver", args, logs))
        http = AdminHttp(settings.port, files.serving_ca, files.admin_cert, files.admin_key)
        return _finish(
            binaries, opts=opts, children=children, http=http, material=material,
            workdir=workdir, logs=logs, etcd_url=etcd.client_url,
        )  # fmt: skip
    except BaseException:
        if not opts.keep:
            stop_all(children)
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def _spawn(opts: Options, name: str, args: Sequence[str], logs: Path) -> Child:
    return spawn(name, args, logs / f"{name}.log", die_with_parent=not opts.keep)


def _apiserver_settings(
    opts: Options, etcd_url: str, files: pki.PkiFiles, logs: Path
) -> cpargs.ApiserverSettings:
    policy = files.directory / "audit-policy.yaml" if opts.audit else None
    if policy is not None:
        policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
    return cpargs.ApiserverSettings(
        etcd_url=etcd_url,
        port=free_port(),
        tls_cert=files.serving_cert,
        tls_key=files.serving_key,
        client_ca=files.client_ca,
        sa_signing_key=files.sa_key,
        sa_public_key=files.sa_pub,
        audit_policy=policy,
        audit_log=logs / "audit.log" if policy else None,
        scale=opts.scale,
    )


def _finish(
    binaries: Binaries,
    *,
    opts: Options,
    children: list[Child],
    http: AdminHttp,
    material: pki.Pki,
    workdir: Path,
    logs: Path,
    etcd_url: str,
) -> ControlPlane:
    apiserver = children[1]
    _wait_readyz(apiserver, http)
    version = http.ok("GET", "/version")["gitVersion"]
    if version != (pin := binaries.version(opts.apiserver)):
        raise StartupError(f"/version says {version}, the pin is {pin}")
    _wait_namespaces(apiserver, http)
    api_url = f"https://127.0.0.1:{http.port}"
    admin = pki.render_kubeconfig(
        api_url, material.serving_ca.cert_pem, user=pki.ADMIN_USER, client=material.admin
    )
    cp = ControlPlane(
        api_url=api_url,
        etcd_url=etcd_url,
        ca_pem=material.serving_ca.cert_pem,
        version=version,
        workdir=workdir,
        logs_dir=logs,
        admin_kubeconfig=pki.write_kubeconfig(workdir / "admin.kubeconfig", admin),
        admission_self_test=admission_self_test(http),
        http=http,
        options=opts,
        pki=material,
        children=children,
    )
    if not opts.keep:
        atexit.register(cp.stop)
    return cp


def _poll(child: Child, deadline: float, what: str, check: Any, on_timeout: Any = None) -> None:
    """Call `check()` every 200 ms until it is true; fail at once if `child` exits."""
    while True:
        if child.exited() is not None:
            raise StartupError(
                f"{child.name} exited with code {child.exited()} while waiting for {what};"
                f" last log lines ({child.log_path}):\n{tail(child.log_path, 50)}"
            )
        try:
            if check():
                return
        except OSError:
            pass  # not listening yet
        if time.monotonic() >= deadline:
            extra = on_timeout() if on_timeout else ""
            raise StartupError(
                f"{child.name}: {what} not reached in time.{extra}\n"
                f"last log lines ({child.log_path}):\n{tail(child.log_path, 50)}"
            )
        time.sleep(0.2)


def _wait_etcd(child: Child, url: str) -> None:
    host, port = url.removeprefix("http://").split(":")

    def healthy() -> bool:
        conn = http.client.HTTPConnection(host, int(port), timeout=2)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            return resp.status == 200 and json.loads(resp.read()).get("health") == "true"
        finally:
            conn.close()

    _poll(child, time.monotonic() + ETCD_READY_TIMEOUT, "etcd /health", healthy)


def _wait_readyz(child: Child, http: AdminHttp) -> None:
    def ready() -> bool:
        resp = http.request("GET", "/readyz")
        return resp.status == 200 and resp.text.strip() == "ok"

    def verbose() -> str:
        try:
            return "\n/readyz?verbose:\n" + http.request("GET", "/readyz?verbose").text
        except OSError as exc:
            return f"\n/readyz?verbose failed: {exc}"

    deadline = time.monotonic() + APISERVER_READY_TIMEOUT
    _poll(child, deadline, "/readyz == ok", ready, verbose)


def _wait_namespaces(child: Child, http: AdminHttp) -> None:
    def all_there() -> bool:
        return all(http.request("GET", f"/api/v1/namespaces/{n}").status == 200 for n in NAMESPACES)

    _poll(child, time.monotonic() + 30, f"namespaces {', '.join(NAMESPACES)}", all_there)


# ------------------------------------------------------------------ make dev-cluster
def _run_dev() -> int:
    from tests.support.binaries import ensure  # noqa: PLC0415 - only the CLI builds

    binaries = ensure(["etcd", "kube-apiserver"])
    run_id = names.new_run_id(datetime.now(UTC), os.getpid())
    artifacts = artifacts_root(os.environ) / run_id
    opts = Options(run_id, artifacts, Path(tempfile.gettempdir()), plane="dev-cluster")
    cp = start_control_plane(binaries, opts)
    print(f"kube-apiserver {cp.version} at {cp.api_url} (etcd {cp.etcd_url})")
    print(f"admission self-test: {cp.admission_self_test}")
    print(f"logs: {cp.logs_dir}")
    print(f"\n    export KUBECONFIG={cp.admin_kubeconfig}\n")
    print(f"Stop with Ctrl-C or `kill {os.getpid()}`.", flush=True)
    return _wait_for_signal(cp)


def _wait_for_signal(cp: ControlPlane) -> int:
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    try:
        while not received:
            if dead := [c for c in cp.children if c.exited() is not None]:
                print(f"{dead[0].name} exited:\n{tail(dead[0].log_path, 30)}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    finally:
        print("stopping the control plane ...", flush=True)
        cp.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.controlplane")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dev", help="run etcd + kube-apiserver on loopback until interrupted")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return _run_dev()


if __name__ == "__main__":
    sys.exit(main())
