"""LB23: the kube-vip ConfigMap read as kube-vip-cloud-provider reads it, on a real apiserver.

A CIDR with host bits as kube-vip's README writes them, .0 and .255 never handed out (even
inside a range), ranges under a `cidr-` key, `range-<namespace>` not read beside
`cidr-<namespace>`, `allow-share` sharing the IPv4 address only.
"""

from __future__ import annotations

from typing import Any

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import CONFIGMAPS
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb

DUAL: dict[str, Any] = {"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]}


def test_lb23_kube_vip_configmap_read_as_kube_vip_cloud_provider_reads_it(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net, other = lb.block(), lb.block()
    _, second, third = net.split(".")
    v6 = f"2001:db8:{second}:{third}::"
    ns = space.name
    data = {f"cidr-{ns}": f"{net}.10/24,{v6}/126",  # host bits, as kube-vip's README has them
            f"range-{ns}": f"{other}.100-{other}.100",  # not read: cidr-<ns> comes first
            f"allow-share-{ns}": "true"}  # fmt: skip
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": ns}, "data": data}  # fmt: skip
    kube.create(CONFIGMAPS, body, namespace=ns)
    start_lb(f"--lb-kubevip-configmap={ns}/kubevip")
    space.service("a", ports=(80,), **DUAL)
    assert lb.allocated(space, "a", 2) == [f"{net}.1", f"{v6}"]  # .0 is never given
    space.service("b", ports=(443,), **DUAL)
    assert lb.allocated(space, "b", 2) == [f"{net}.1", f"{v6}1"]  # shares IPv4 only
    space.service("asks", annotations={"kube-vip.io/loadbalancerIPs": f"{other}.100"})
    lb.refused(space, "asks", "AddressNotInPool")
    # ranges under a cidr- key are ranges; the .255 of one is never given
    ranges = f"{net}.1-{net}.1,{net}.254-{net}.255,{v6}-{v6}1"
    kube.patch(CONFIGMAPS, "kubevip", {"data": {f"cidr-{ns}": ranges}}, patch_type="merge",
               namespace=ns)  # fmt: skip
    space.service("d", ports=(80,))  # port 80 clashes with a on .1
    assert lb.allocated(space, "d") == [f"{net}.254"]
    space.service("e", ports=(80,))
    lb.refused(space, "e", "PoolExhausted")
    assert lb.ips(space.get("a")) == [f"{net}.1", f"{v6}"]
