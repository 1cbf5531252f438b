"""Command lines of etcd, kube-apiserver and kube-controller-manager (docs/testing.md).
Pure, no I/O.

The build step derives the list of flags to look for in `kube-apiserver --help` from these
same builders, so a renamed flag is caught right after the build, not at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The apiserver's advertise address: a documentation address on no interface.
ADVERTISE_ADDRESS = "192.0.2.1"
# Dual-stack, so Services may ask for both families; a /16 holds the 2 000 Services of LB14.
SERVICE_CIDR = "10.96.0.0/16,fd00:5e::/112"
FIRST_SERVICE_IP = "10.96.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMISSION_PLUGINS = ("NodeRestriction", "ValidatingAdmissionPolicy")
# Controllers that cannot disturb other tests. Never node-ipam-controller: it would be a
# second pod-CIDR allocator fighting ours. Never node-lifecycle-controller on the shared plane.
HARMLESS_CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "clusterrole-aggregation-controller",
    "validatingadmissionpolicy-status-controller",
    "root-ca-certificate-publisher-controller",
)
NODE_LIFECYCLE_CONTROLLERS = ("node-lifecycle-controller", "taint-eviction-controller")
# The real-node tier's own plane (tests/realnode): the not-ready taint goes when the kubelet
# reports Ready, DaemonSets and Deployments get Pods, and kubelet certificates are signed.
REAL_NODE_CONTROLLERS = (
    *HARMLESS_CONTROLLERS,
    "node-lifecycle-controller",
    "daemonset-controller",
    "deployment-controller",
    "replicaset-controller",
    "certificatesigningrequest-signing-controller",
)


@dataclass(frozen=True)
class EtcdSettings:
    data_dir: Path
    client_port: int
    peer_port: int
    scale: bool = False

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"


def etcd_args(binary: Path, s: EtcdSettings) -> list[str]:
    peer = f"http://127.0.0.1:{s.peer_port}"
    args = [
        str(binary),
        "--name=t",
        f"--data-dir={s.data_dir}",
        f"--listen-client-urls={s.client_url}",
        f"--advertise-client-urls={s.client_url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=t={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]
    if s.scale:
        args += [
            "--quota-backend-bytes=8589934592",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=10m",
        ]
    return args


@dataclass(frozen=True)
class ApiserverSettings:
    etcd_url: str
    port: int
    tls_cert: Path
    tls_key: Path
    client_ca: Path
    sa_signing_key: Path
    sa_public_key: Path
    audit_policy: Path | None = None
    audit_log: Path | None = None
    scale: bool = False


def apiserver_args(binary: Path, s: ApiserverSettings) -> list[str]:
    args = [
        str(binary),
        f"--etcd-servers={s.etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={s.port}",
        f"--advertise-address={ADVERTISE_ADDRESS}",
        f"--tls-cert-file={s.tls_cert}",
        f"--tls-private-key-file={s.tls_key}",
        f"--client-ca-file={s.client_ca}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-signing-key-file={s.sa_signing_key}",
        f"--service-account-key-file={s.sa_public_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]
    if s.audit_policy and s.audit_log:
        # The log writer rotates at --audit-log-maxsize MB, 100 when it is 0; a reader that
        # follows the file (AuditTail) or reads it whole (AuditLog) must see one file.
        args += [f"--audit-policy-file={s.audit_policy}", f"--audit-log-path={s.audit_log}",
                 "--audit-log-maxsize=1000000"]  # fmt: skip
    if s.scale:
        args += [
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
        ]
    return args


@dataclass(frozen=True)
class KcmSettings:
    kubeconfig: Path
    port: int
    cert_dir: Path
    root_ca: Path
    controllers: tuple[str, ...] = HARMLESS_CONTROLLERS
    extra: tuple[str, ...] = ()


def kcm_args(binary: Path, s: KcmSettings) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={s.kubeconfig}",
        f"--authentication-kubeconfig={s.kubeconfig}",
        f"--authorization-kubeconfig={s.kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={s.port}",
        f"--cert-dir={s.cert_dir}",
        "--leader-elect=false",
        "--allocate-node-cidrs=false",
        f"--root-ca-file={s.root_ca}",
        f"--controllers={','.join(s.controllers)}",
        *s.extra,
    ]


def node_lifecycle_kcm_extra() -> tuple[str, ...]:
    """Flags for the dedicated node-lifecycle plane."""
    return ("--node-monitor-period=2s", "--node-monitor-grace-period=20s")


def real_node_kcm_extra(signing_cert: Path, signing_key: Path) -> tuple[str, ...]:
    """The CA that signs kubelet certificates (the apiserver's client CA, as kubeadm does)."""
    return (
        f"--cluster-signing-cert-file={signing_cert}",
        f"--cluster-signing-key-file={signing_key}",
    )


_FLAG = re.compile(r"^--([a-z0-9-]+)")


def flag_names(args: Sequence[str]) -> list[str]:
    """The long flag names used in a command line, in order, without duplicates."""
    names = [m.group(1) for a in args[1:] if (m := _FLAG.match(a))]
    return list(dict.fromkeys(names))


def _sample_path(name: str) -> Path:
    return Path("/nonexistent") / name


def apiserver_flags_used() -> list[str]:
    """Every apiserver flag the harness can pass, from a command line with all options on."""
    p = _sample_path
    sample = ApiserverSettings(
        "http://127.0.0.1:1", 1, p("c"), p("k"), p("ca"), p("sa"), p("sa.pub"), p("a"), p("l"), True
    )
    return flag_names(apiserver_args(p("kube-apiserver"), sample))


def kcm_flags_used() -> list[str]:
    sample = KcmSettings(_sample_path("kc"), 1, _sample_path("d"), _sample_path("ca"))
    flags = flag_names(kcm_args(_sample_path("kcm"), sample))
    signer = real_node_kcm_extra(_sample_path("ca.crt"), _sample_path("ca.key"))
    return flags + flag_names(["kcm", *node_lifecycle_kcm_extra(), *signer])
