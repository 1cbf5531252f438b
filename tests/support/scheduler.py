"""kube-scheduler beside the test apiserver, for tiers whose Pods must land on a Node (the
real-node tier: DaemonSet and Deployment Pods are bound to a Node only by the scheduler)."""

from __future__ import annotations

from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.kcm import wait_healthz
from tests.support.processes import Child, free_port, spawn


def scheduler_args(binary: str, kubeconfig: str, port: int, cert_dir: str) -> list[str]:
    """Loopback only, no leader election; the admin kubeconfig for the API and for the
    delegated authentication and authorization of its own /healthz and /metrics."""
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


def start_scheduler(cp: ControlPlane, binaries: Binaries) -> Child:
    """Start kube-scheduler against ``cp``; stopped with the plane."""
    port = free_port()
    args = scheduler_args(str(binaries.path("kube-scheduler")), str(cp.admin_kubeconfig), port,
                          str(cp.workdir / "kube-scheduler"))  # fmt: skip
    log_path = cp.logs_dir / "kube-scheduler.log"
    child = spawn("kube-scheduler", args, log_path, die_with_parent=not cp.options.keep)
    cp.adopt(child)
    wait_healthz(child, port)
    return child
