"""What a real node runs from (tests/support/nodeconf.py): names a later run can attribute to
a dead driver, containerd's and the kubelet's configs, and the order PID 1 does things in."""

from __future__ import annotations

import json
import tomllib
from ipaddress import IPv4Network
from pathlib import Path

import yaml

from tests.support import nodeconf as nc

NAMES = nc.NodeNames(4242, 3, Path("/tmp"))
FILES = nc.NodeFiles(NAMES.node_dir, Path("/artifacts/realnode-x"))


def test_everything_on_the_host_is_named_after_the_driver_pid() -> None:
    assert NAMES.tag == "lcrn-4242-3"
    assert (NAMES.node_ns, NAMES.gateway_ns, NAMES.cgroup) == (
        "lcrn-4242-3", "lcrn-4242-3-gw", "lcrn-4242-3",
    )  # fmt: skip
    assert NAMES.node_dir == Path("/tmp/lcrn-4242-3")
    for name in (NAMES.node_ns, NAMES.gateway_ns, NAMES.cgroup, NAMES.node_dir.name):
        assert nc.owner_pid(name) == 4242
    assert nc.owner_pid("lcct-4242-1") is None
    assert nc.owner_pid("lcrn-x-1") is None


def test_unix_sockets_stay_short() -> None:
    # sun_path holds 108 bytes; containerd also derives longer names from these.
    assert len(str(FILES.socket)) < 40


def test_containerd_config_keeps_state_private_and_restricts_oom_score_adj() -> None:
    config = tomllib.loads(nc.containerd_config(FILES, "local-ccm.test/pause:k"))
    assert config["version"] == 2
    assert (config["root"], config["state"]) == ("/var/lib/containerd", "/run/containerd")
    assert config["grpc"]["address"] == str(FILES.socket)
    assert config["ttrpc"]["address"].startswith(str(NAMES.node_dir))
    assert "io.containerd.snapshotter.v1.btrfs" in config["disabled_plugins"]
    opt = config["plugins"]["io.containerd.internal.v1.opt"]["path"]
    assert opt.startswith(nc.PRIVATE_DIRS)  # not /opt/containerd on the host
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "local-ccm.test/pause:k"
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": str(FILES.cni_dir)}
    assert cri["registry"] == {"config_path": str(FILES.registry_hosts)}


def test_registry_hosts_toml_names_the_scheme_and_the_ca() -> None:
    plain = tomllib.loads(nc.registry_hosts_toml("127.0.0.1:5000", plain_http=True))
    assert plain["server"] == "http://127.0.0.1:5000"
    assert plain["host"] == {"http://127.0.0.1:5000": {"capabilities": ["pull", "resolve"]}}
    tls = tomllib.loads(nc.registry_hosts_toml("127.0.0.1:5000", plain_http=False,
                                               ca=Path("/x/ca.crt")))  # fmt: skip
    assert tls["host"]["https://127.0.0.1:5000"]["ca"] == "/x/ca.crt"


def test_the_pod_network_is_a_documentation_range_without_masquerading() -> None:
    (bridge,) = json.loads(nc.cni_conflist())["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["ipMasq"] is False
    (((subnet,),),) = (bridge["ipam"]["ranges"],)
    pods = IPv4Network(subnet["subnet"])
    assert pods.subnet_of(IPv4Network("192.0.2.0/24"))
    assert not pods.overlaps(nc.NODE_V4.network)


def test_a_pod_network_from_the_node_s_range_names_that_range_literally() -> None:
    """host-local has no ``usePodCidr``: the range a Node was given is written as it is."""
    (bridge,) = json.loads(nc.cni_conflist(IPv4Network("192.0.2.144/28")))["plugins"]
    assert bridge["ipam"]["type"] == "host-local"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "192.0.2.144/28"}]]


def test_kubelet_config_for_cgroup_v1_under_its_own_root() -> None:
    config = yaml.safe_load(nc.kubelet_config(FILES, cgroup_root=NAMES.cgroup))
    assert config["kind"] == "KubeletConfiguration"
    assert (config["failCgroupV1"], config["cgroupDriver"]) == (False, "cgroupfs")
    assert config["cgroupRoot"] == "/lcrn-4242-3"
    assert config["containerRuntimeEndpoint"] == f"unix://{FILES.socket}"
    assert config["authorization"] == {"mode": "AlwaysAllow"}
    assert config["authentication"]["x509"]["clientCAFile"] == str(FILES.client_ca)
    assert (config["readOnlyPort"], config["resolvConf"]) == (0, "")
    assert config["podLogsDir"] == "/artifacts/realnode-x/pods"
    assert config["volumePluginDir"].startswith(nc.PRIVATE_DIRS)
    assert config["serverTLSBootstrap"] is False
    bootstrap = nc.kubelet_config(FILES, cgroup_root="c", server_tls_bootstrap=True)
    assert yaml.safe_load(bootstrap)["serverTLSBootstrap"] is True


def test_kubelet_flags_external_cloud_provider_and_optional_node_ip() -> None:
    args = nc.kubelet_args(Path("/bin/kubelet"), FILES, node_name="n1")
    assert args[0] == "/bin/kubelet"
    assert "--cloud-provider=external" in args
    assert "--hostname-override=n1" in args
    assert not [a for a in args if a.startswith("--node-ip")]
    assert all(a.split("=", 1)[1].startswith(nc.PRIVATE_DIRS) for a in args
               if a.startswith(("--root-dir", "--cert-dir")))  # fmt: skip
    with_ip = nc.kubelet_args(Path("/bin/kubelet"), FILES, node_name="n1", node_ip="192.0.2.10")
    assert with_ip[-1] == "--node-ip=192.0.2.10"


def test_the_node_dies_with_its_driver() -> None:
    argv = nc.node_argv("lcrn-1-1", Path("/tmp/lcrn-1-1/init.sh"))
    assert argv[:4] == ["setpriv", "--pdeathsig", "KILL", "--"]
    assert "--net=/run/netns/lcrn-1-1" in argv
    unshare = argv[argv.index("unshare") :]
    for flag in ("--mount", "--pid", "--fork", "--mount-proc", "--kill-child"):
        assert flag in unshare
    assert unshare[unshare.index("--propagation") + 1] == "private"
    assert argv[-2:] == ["bash", "/tmp/lcrn-1-1/init.sh"]


def test_pid_1_isolates_first_then_containerd_images_kubelet() -> None:
    images = [nc.ImageImport(Path("/c/pause.tar")),
              nc.ImageImport(Path("/b/local-ccm.oci.tar"), "local-ccm.test/local-ccm")]  # fmt: skip
    lines = nc.init_script(
        FILES, images=images, kubelet_argv=["/bin/kubelet", "--v=2"]
    ).splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    mounts = [i for i, line in enumerate(lines) if line.startswith("mount ")]
    assert len(mounts) == len(nc.PRIVATE_DIRS) + len(nc.KERNEL_TUNABLES)
    for key in nc.KERNEL_TUNABLES:
        assert f"mount --bind {FILES.tunable(key)} /proc/sys/{key}" in lines
    assert max(mounts) < first("containerd --config") < first("trap stop TERM")
    assert first("trap stop TERM") < first("images import /c/pause.tar")
    assert first("--base-name local-ccm.test/local-ccm /b/local-ccm.oci.tar") < first(
        "/bin/kubelet --v=2"
    )
    assert lines[-1] == "exit 1"  # the kubelet or containerd ended on its own


def test_a_restartable_kubelet_is_stopped_and_started_by_signals_trapped_before_the_imports() -> (
    None
):
    images = [nc.ImageImport(Path("/c/pause.tar"))]
    argv = ["/bin/kubelet", "--v=2"]
    plain = nc.init_script(FILES, images=images, kubelet_argv=argv).splitlines()
    lines = nc.init_script(FILES, images=images, kubelet_argv=argv, restartable=True).splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert not [line for line in plain if "USR1" in line or "USR2" in line]
    # trapped beside TERM: a signal during the imports must not end PID 1
    assert first("trap stop TERM") < first("trap stop_kubelet USR1") < first("images import")
    assert first("trap start_kubelet USR2") < first("images import")
    (start,) = [i for i, line in enumerate(lines) if "/bin/kubelet --v=2" in line]
    assert first("start_kubelet() {") < start < first("stop_kubelet() {")  # only in the function
    assert first("images imported") < lines.index("start_kubelet") < first("while :; do")
    # the loop ends only when containerd, or a kubelet not stopped on purpose, has ended
    loop = lines[first("while :; do") : lines.index("done", first("while :; do")) + 1]
    assert '  kill -0 "$CONTAINERD" 2>/dev/null || break' in loop
    assert '  [ -z "$KUBELET" ] || kill -0 "$KUBELET" 2>/dev/null || break' in loop
    assert lines[-1] == "exit 1"


def test_the_tunables_hold_what_the_kubelet_would_write() -> None:
    files = nc.tunable_files(FILES)
    assert files[FILES.tunable("vm/overcommit_memory")] == "1\n"
    assert files[FILES.tunable("kernel/panic")] == "10\n"
    assert files[FILES.tunable("kernel/panic_on_oops")] == "1\n"
    assert {p.parent for p in files} == {FILES.tunables_dir}


def test_kube_proxy_runs_after_the_imports_and_stops_first() -> None:
    images = [nc.ImageImport(Path("/c/pause.tar"))]
    proxy = nc.kube_proxy_args(Path("/bin/kube-proxy"), FILES)
    plain = nc.init_script(FILES, images=images, kubelet_argv=["/bin/kubelet"])
    lines = nc.init_script(FILES, images=images, kubelet_argv=["/bin/kubelet"],
                           kube_proxy_argv=proxy).splitlines()  # fmt: skip

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert "/bin/kube-proxy" not in plain
    assert first("images imported") < first("/bin/kube-proxy --config=") < first("/bin/kubelet")
    assert first("kube-proxy.log") == first("/bin/kube-proxy")
    # stop(): kube-proxy before the kubelet and containerd
    assert first("stop() {") < first('kill -TERM "$PROXY"') < first('kill -TERM "$KUBELET"')


def test_kube_proxy_leaves_host_wide_settings_alone() -> None:
    config = yaml.safe_load(
        nc.kube_proxy_config(FILES, node_name="lcrn-4242-3", cluster_cidr=nc.POD_SUBNET)
    )
    assert config["mode"] == "iptables"  # binds no Service address to an interface
    assert config["hostnameOverride"] == "lcrn-4242-3"
    assert config["clientConnection"]["kubeconfig"] == str(FILES.kube_proxy_kubeconfig)
    assert config["clusterCIDR"] == str(nc.POD_SUBNET)
    # no nf_conntrack_max or conntrack timeouts, no route_localnet, no oom_score_adj
    assert config["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                                   "tcpCloseWaitTimeout": "0s"}  # fmt: skip
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["oomScoreAdj"] == 0
    assert config["healthzBindAddress"].startswith("127.0.0.1:")
    assert config["metricsBindAddress"].startswith("127.0.0.1:")
