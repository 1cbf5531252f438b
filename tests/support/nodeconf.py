"""What a real node of the real-node tier is made of: names, addresses, and the text of every
file it runs from (containerd's config, the kubelet's config and flags, the CNI network, the
script that is PID 1 of the node's PID namespace). Pure, no I/O; tests/support/realnode.py
writes these files and runs them (docs/testing.md, "The real-node tier").
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Interface, IPv4Network
from pathlib import Path

import yaml

PREFIX = "lcrn"
_OWNED = re.compile(rf"^{PREFIX}-(\d+)-")
# The node's uplink: eth0 in the node namespace, gw0 in a gateway namespace that routes
# nowhere; a default route via gw0 lets route lookups find eth0, and whatever is sent dies there.
NODE_V4 = IPv4Interface("192.0.2.10/25")
GATEWAY_V4 = IPv4Interface("192.0.2.126/25")
# Pods that are not hostNetwork get addresses here, on the bridge cni0 inside the node namespace.
POD_SUBNET = IPv4Network("192.0.2.128/25")
CNI_BINARIES = Path("/usr/lib/cni")
# What the kubelet writes host-wide at start (pkg/kubelet/cm setupKernelTunables, v1.37): inside
# the node these /proc/sys files are regular files already holding these values, so the kubelet
# finds nothing to change.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1_000_000,
    "kernel/keys/root_maxbytes": 25_000_000,
}
# tmpfs inside the node's mount namespace: what containerd, the CNI plugins and the kubelet write
# there by default (state, sockets, pod network namespaces, IPAM leases, logs) vanishes with it.
PRIVATE_DIRS = ("/run", "/var/lib", "/var/log")
KUBELET_ROOT = "/var/lib/kubelet"
CONTAINERD_WAIT_TENTHS = 600  # the init script gives containerd 60 s to answer on its socket
# Disabled snapshotters: none of them works (or is wanted) here, and each would log its failure.
DISABLED_PLUGINS = tuple(f"io.containerd.snapshotter.v1.{s}"
                         for s in ("btrfs", "zfs", "devmapper", "aufs"))  # fmt: skip


@dataclass(frozen=True)
class NodeNames:
    """Everything of one node on the host is named ``lcrn-<driver pid>-<n>``: a later run
    removes what a killed driver left (:func:`owner_pid`)."""

    pid: int
    n: int
    base: Path  # the directory holding node directories (short: unix socket paths are limited)

    @property
    def tag(self) -> str:
        return f"{PREFIX}-{self.pid}-{self.n}"

    @property
    def node_ns(self) -> str:
        return self.tag

    @property
    def gateway_ns(self) -> str:
        return f"{self.tag}-gw"

    @property
    def cgroup(self) -> str:
        """The kubelet's cgroupRoot, one directory below the root of every hierarchy."""
        return self.tag

    @property
    def node_dir(self) -> Path:
        return self.base / self.tag


def owner_pid(name: str) -> int | None:
    """The driver pid a host object's name carries, None for names of others."""
    match = _OWNED.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ImageImport:
    """An OCI archive to import; ``base_name`` names images whose index has only a ref name."""

    archive: Path
    base_name: str | None = None


@dataclass(frozen=True)
class NodeFiles:
    """Where the node's files live (all under its node directory except the logs)."""

    node_dir: Path
    logs: Path

    @property
    def containerd_config(self) -> Path:
        return self.node_dir / "containerd.toml"

    @property
    def socket(self) -> Path:
        return self.node_dir / "c.sock"

    @property
    def kubelet_config(self) -> Path:
        return self.node_dir / "kubelet.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.node_dir / "kubelet.kubeconfig"

    @property
    def client_ca(self) -> Path:
        return self.node_dir / "client-ca.crt"

    @property
    def cni_dir(self) -> Path:
        return self.node_dir / "cni"

    @property
    def registry_hosts(self) -> Path:
        """containerd's ``config_path``: ``<host[:port]>/hosts.toml`` per registry."""
        return self.node_dir / "certs.d"

    @property
    def kube_proxy_config(self) -> Path:
        return self.node_dir / "kube-proxy.yaml"

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        return self.node_dir / "kube-proxy.kubeconfig"

    @property
    def tunables_dir(self) -> Path:
        return self.node_dir / "sysctl"

    @property
    def init_script(self) -> Path:
        return self.node_dir / "init.sh"

    def tunable(self, key: str) -> Path:
        return self.tunables_dir / key.replace("/", ".")


# ------------------------------------------------------------------ containerd
def containerd_config(files: NodeFiles, sandbox_image: str) -> str:
    """containerd 1.6's config (version 2). ``restrict_oom_score_adj``: runc cannot give the
    sandbox its oom_score_adj of -998 where root lacks CAP_SYS_RESOURCE (every Pod then fails
    with "can't get final child's PID from pipe: EOF")."""
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    runc = f"{cri[:-1]}.containerd.runtimes.runc]"
    lines = [
        "version = 2",
        'root = "/var/lib/containerd"',
        'state = "/run/containerd"',
        f"disabled_plugins = {json.dumps(list(DISABLED_PLUGINS))}",
        "[grpc]",
        f"  address = {json.dumps(str(files.socket))}",
        "[ttrpc]",
        f"  address = {json.dumps(str(files.node_dir / 't.sock'))}",
        '[plugins."io.containerd.internal.v1.opt"]',
        '  path = "/var/lib/containerd-opt"',
        cri,
        f"  sandbox_image = {json.dumps(sandbox_image)}",
        "  restrict_oom_score_adj = true",
        f"{cri[:-1]}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        runc,
        '  runtime_type = "io.containerd.runc.v2"',
        f"{runc[:-1]}.options]",
        "  SystemdCgroup = false",
        f"{cri[:-1]}.cni]",
        f"  bin_dir = {json.dumps(str(CNI_BINARIES))}",
        f"  conf_dir = {json.dumps(str(files.cni_dir))}",
        f"{cri[:-1]}.registry]",
        f"  config_path = {json.dumps(str(files.registry_hosts))}",
    ]
    return "\n".join(lines) + "\n"


def registry_hosts_toml(host: str, *, plain_http: bool, ca: Path | None = None) -> str:
    """containerd's ``hosts.toml`` for the registry at ``host`` (``127.0.0.1:<port>``): pull
    and resolve from it over plain HTTP, or over TLS checked against ``ca``."""
    server = f"{'http' if plain_http else 'https'}://{host}"
    lines = [f"server = {json.dumps(server)}", f"[host.{json.dumps(server)}]",
             '  capabilities = ["pull", "resolve"]']  # fmt: skip
    if ca is not None:
        lines.append(f"  ca = {json.dumps(str(ca))}")
    return "\n".join(lines) + "\n"


def cni_conflist(subnet: IPv4Network = POD_SUBNET) -> str:
    """A bridge with host-local addresses from ``subnet``, no masquerading: pods reach each
    other and the node, nothing leaves the node namespace. host-local needs a literal subnet
    (``usePodCidr`` is kubenet's and flannel's idiom, not the plugin's), so a node whose range
    comes from its Node's ``spec.podCIDRs`` gets this file written once that range is known,
    as flannel and kube-router write theirs."""
    bridge = {
        "type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
        "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": str(subnet)}]],
                 "routes": [{"dst": "0.0.0.0/0"}]},
    }  # fmt: skip
    return json.dumps({"cniVersion": "1.0.0", "name": PREFIX, "plugins": [bridge]}, indent=2)


# ------------------------------------------------------------------ kubelet
def kubelet_config(
    files: NodeFiles, *, cgroup_root: str, server_tls_bootstrap: bool = False
) -> str:
    """The KubeletConfiguration: cgroup v1 with the cgroupfs driver under ``cgroup_root``, no
    webhook authentication or authorization (the apiserver is the only client that matters),
    no read-only port or resolv.conf, pod logs in the logs directory, thresholds low enough for
    a test machine's disk."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cgroup_root}",
        "containerRuntimeEndpoint": f"unix://{files.socket}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(files.client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "resolvConf": "",
        "podLogsDir": str(files.logs / "pods"),
        "volumePluginDir": f"{KUBELET_ROOT}/volume-plugins",
        "serverTLSBootstrap": server_tls_bootstrap,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,  # 100: image garbage collection off
        "imageGCLowThresholdPercent": 99,
    }  # fmt: skip
    return yaml.safe_dump(config, sort_keys=False)


def kubelet_args(
    kubelet: Path, files: NodeFiles, *, node_name: str, node_ip: str | None = None
) -> list[str]:
    args = [
        str(kubelet),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubeconfig}",
        f"--root-dir={KUBELET_ROOT}",
        f"--cert-dir={KUBELET_ROOT}/pki",
        f"--hostname-override={node_name}",
        "--cloud-provider=external",
        "--v=2",
    ]
    return [*args, f"--node-ip={node_ip}"] if node_ip else args


# ------------------------------------------------------------------ kube-proxy
def kube_proxy_config(files: NodeFiles, *, node_name: str, cluster_cidr: IPv4Network) -> str:
    """The KubeProxyConfiguration of a node that runs kube-proxy (opt-in: NodeSpec.kube_proxy).

    iptables mode through Debian's iptables (its nft backend): the rules live in the node's
    network namespace, like nftables mode's would; iptables mode is the default and what most
    clusters run, and it binds no Service address to any interface (IPVS mode puts every
    LoadBalancer address on ``kube-ipvs0``, and the kernel would answer ARP for it unless
    ``strictARP``). Everything host-wide is left alone: no conntrack table size or timeouts
    (``nf_conntrack_max`` is the host's), no ``route_localnet`` (``localhostNodePorts`` off), no
    oom_score_adj (root here lacks CAP_SYS_RESOURCE); health and metrics on the node's
    loopback."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(files.kube_proxy_kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": str(cluster_cidr),
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "oomScoreAdj": 0,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }  # fmt: skip
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_args(kube_proxy: Path, files: NodeFiles) -> list[str]:
    return [str(kube_proxy), f"--config={files.kube_proxy_config}", "--v=2"]


# ------------------------------------------------------------------ the node's PID 1
def node_argv(netns: str, init_script: Path) -> list[str]:
    """The node's start command: PID 1 of new PID and mount namespaces inside ``netns``.

    ``--pdeathsig KILL`` (not TERM: ``unshare --fork`` would outlive its parent) ends unshare
    with the thread that spawned it; ``--kill-child`` then kills PID 1, and the kernel every
    other process of the namespace."""
    return [
        "setpriv", "--pdeathsig", "KILL", "--",
        "nsenter", f"--net=/run/netns/{netns}", "--",
        "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
        "--kill-child", "--", "bash", str(init_script),
    ]  # fmt: skip


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def init_script(
    files: NodeFiles,
    *,
    images: Sequence[ImageImport],
    kubelet_argv: Sequence[str],
    restartable: bool = False,
    kube_proxy_argv: Sequence[str] = (),
) -> str:
    """PID 1 of the node: private tmpfs mounts, the pinned /proc/sys files, containerd, the
    image imports, then the kubelet. SIGTERM stops the kubelet, then containerd, and exits;
    the kernel then kills what is left in the namespace (shims, pods). If the kubelet or
    containerd exits on its own, so does PID 1 (the harness sees the node end).

    ``restartable``: SIGUSR1 stops the kubelet (SIGTERM, waited for) and SIGUSR2 starts it
    again, containerd and the Pods' containers running on; a kubelet that ends on its own still
    ends the node. A kubelet started again registers its Node anew if the Node was deleted
    meanwhile: a join without rebuilding the node (tests/bench/test_compare_join.py).
    ``kube_proxy_argv``: kube-proxy starts before the kubelet and is stopped first; if it ends
    on its own, so does PID 1 (not on a restartable node: there only the kubelet and
    containerd are watched)."""
    ctr = f"ctr --address {_q(files.socket)} --namespace k8s.io"
    kubelet = f"{shlex.join(kubelet_argv)} >>{_q(files.logs / 'kubelet.log')} 2>&1 &"
    proxy_log = _q(files.logs / "kube-proxy.log")
    proxy_start = f"{shlex.join(kube_proxy_argv)} >>{proxy_log} 2>&1 &"
    proxy = [proxy_start, "PROXY=$!", 'echo "lcrn: kube-proxy started"'] if kube_proxy_argv else []
    lines = [
        "set -eu",
        'KUBELET=""',
        'PROXY=""',
        *(f"mount -t tmpfs -o mode=0755 {PREFIX} {d}" for d in PRIVATE_DIRS),
        *(f"mount --bind {_q(files.tunable(k))} /proc/sys/{k}" for k in KERNEL_TUNABLES),
        f"containerd --config {_q(files.containerd_config)} "
        f">>{_q(files.logs / 'containerd.log')} 2>&1 &",
        "CONTAINERD=$!",
        "stop() {",
        '  if [ -n "$PROXY" ]; then kill -TERM "$PROXY" 2>/dev/null || true; '
        'wait "$PROXY" || true; fi',
        '  if [ -n "$KUBELET" ]; then kill -TERM "$KUBELET" 2>/dev/null || true; '
        'wait "$KUBELET" || true; fi',
        '  kill -TERM "$CONTAINERD" 2>/dev/null || true; wait "$CONTAINERD" || true',
        '  echo "lcrn: stopped"; exit 0',
        "}",
        "trap stop TERM",
        *(_kubelet_controls(kubelet) if restartable else ()),
        "i=0",
        f"until {ctr} version >/dev/null 2>&1; do",
        f'  i=$((i + 1)); [ "$i" -lt {CONTAINERD_WAIT_TENTHS} ] || '
        '{ echo "lcrn: containerd did not answer"; exit 1; }',
        "  sleep 0.1",
        "done",
        'echo "lcrn: containerd ready"',
        *(_import(ctr, image) for image in images),
        'echo "lcrn: images imported"',
        *proxy,
        *(_RESTARTABLE_KUBELET if restartable else _kubelet(kubelet)),
        'echo "lcrn: kubelet or containerd exited"',
        "exit 1",
    ]
    return "\n".join(lines) + "\n"


def _kubelet(start: str) -> list[str]:
    return [
        start,
        "KUBELET=$!",
        'echo "lcrn: kubelet started"',
        "wait -n || true",  # returns when either ends, or at once for the trap
    ]


def _kubelet_controls(start: str) -> list[str]:
    """``start_kubelet`` (SIGUSR2) and ``stop_kubelet`` (SIGUSR1), defined and trapped beside
    the TERM trap: a signal before its trap would end PID 1 (the default action)."""
    return [
        "start_kubelet() {",
        '  [ -z "$KUBELET" ] || return 0',
        f"  {start}",
        "  KUBELET=$!",
        '  echo "lcrn: kubelet started"',
        "}",
        "stop_kubelet() {",
        '  [ -n "$KUBELET" ] || return 0',
        '  kill -TERM "$KUBELET" 2>/dev/null || true; wait "$KUBELET" || true',
        '  KUBELET=""; echo "lcrn: kubelet stopped"',
        "}",
        "trap stop_kubelet USR1",
        "trap start_kubelet USR2",
    ]


# ``wait -n`` also returns for every trapped signal, so PID 1 waits again until containerd, or
# a kubelet it did not stop, has ended.
_RESTARTABLE_KUBELET = (
    "start_kubelet",
    "while :; do",
    "  wait -n || true",
    '  kill -0 "$CONTAINERD" 2>/dev/null || break',
    '  [ -z "$KUBELET" ] || kill -0 "$KUBELET" 2>/dev/null || break',
    "done",
)


def _import(ctr: str, image: ImageImport) -> str:
    base = f" --base-name {_q(image.base_name)}" if image.base_name else ""
    return f"{ctr} images import{base} {_q(image.archive)} >/dev/null"


def tunable_files(files: NodeFiles) -> Mapping[Path, str]:
    """The regular files bind-mounted over /proc/sys inside the node, with their content."""
    return {files.tunable(k): f"{v}\n" for k, v in KERNEL_TUNABLES.items()}
