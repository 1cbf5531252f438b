"""kube-controller-manager with a chosen controller set."""

from __future__ import annotations

import http.client
import secrets
import ssl
import time
from collections.abc import Sequence

from tests.support import cpargs, names
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.processes import Child, StartupError, free_port, spawn, tail

READY_TIMEOUT = 30.0


def start_kcm(
    cp: ControlPlane,
    binaries: Binaries,
    *,
    controllers: Sequence[str] = cpargs.HARMLESS_CONTROLLERS,
    extra: Sequence[str] = (),
) -> Child:
    """Start KCM against `cp` with the admin kubeconfig and wait until it has an effect."""
    if "node-ipam-controller" in controllers:
        raise ValueError("node-ipam-controller would fight our IPAM controller; never enable it")
    settings = cpargs.KcmSettings(
        kubeconfig=cp.admin_kubeconfig,
        port=free_port(),
        cert_dir=cp.workdir / "kcm",
        root_ca=cp.workdir / "pki" / "serving-ca.crt",
        controllers=tuple(controllers),
        extra=tuple(extra),
    )
    args = cpargs.kcm_args(binaries.path("kube-controller-manager"), settings)
    log_path = cp.logs_dir / "kube-controller-manager.log"
    child = spawn("kube-controller-manager", args, log_path, die_with_parent=not cp.options.keep)
    cp.adopt(child)
    wait_healthz(child, settings.port)
    if "serviceaccount-controller" in controllers:
        wait_default_serviceaccount(cp, child)
    return child


def wait_healthz(child: Child, port: int) -> None:
    """/healthz on the secure port of KCM (or kube-scheduler: the same server), always allowed
    without authentication."""
    # It serves a self-signed certificate from its --cert-dir; this is a loopback liveness
    # probe of a process we started, so the certificate is not verified.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        if child.exited() is not None or time.monotonic() >= deadline:
            raise StartupError(
                f"{child.name}: /healthz not ok within {READY_TIMEOUT:.0f} s "
                f"(exit code {child.exited()}); last log lines:\n{tail(child.log_path, 50)}"
            )
        time.sleep(0.2)


def wait_default_serviceaccount(cp: ControlPlane, child: Child) -> None:
    """Readiness by effect: a fresh namespace gets its `default` ServiceAccount."""
    ns = f"lcct-kcm-ready-{secrets.token_hex(3)}"
    meta = {"name": ns, "labels": {names.RUN_LABEL: cp.options.run_id}}
    cp.http.ok(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    )
    deadline = time.monotonic() + READY_TIMEOUT
    try:
        while (
            cp.http.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default").status != 200
        ):
            if child.exited() is not None or time.monotonic() >= deadline:
                raise StartupError(
                    f"kube-controller-manager: no default ServiceAccount in {ns} within "
                    f"{READY_TIMEOUT:.0f} s (exit code {child.exited()}); last log lines:\n"
                    f"{tail(child.log_path, 50)}"
                )
            time.sleep(0.2)
    finally:
        cp.http.request("DELETE", f"/api/v1/namespaces/{ns}")
