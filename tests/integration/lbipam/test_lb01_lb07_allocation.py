"""LB01–LB07: service-lb-ipam on a real apiserver (dual-stack Service CIDRs), one controller
process per test, pools selecting only the test's own namespace.

LB01 single-stack; LB02 dual-stack (RequireDualStack, PreferDualStack); LB03 requested
addresses (our annotation, MetalLB's, kube-vip's, spec.loadBalancerIP); LB04 an address
outside every pool; LB05 sharing allowed and denied by ports; LB06 class filtering;
LB07 exhaustion and recovery on release; LB15 readiness and the metrics.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from local_ccm.kube.client import Client, Obj
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.processes import free_port
from tests.support.waiting import eventually

SETTLE = lb.SETTLE


def test_lb01_single_stack_service_gets_the_first_usable_address(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    pool = space.pool([f"{net}.0/29"])
    start_lb()
    space.service("web")
    assert lb.allocated(space, "web") == [f"{net}.1"]  # .0 skipped: allowFirstAndLast false
    svc = space.get("web")
    assert svc["status"]["loadBalancer"]["ingress"] == [{"ip": f"{net}.1", "ipMode": "VIP"}]
    assert not lb.has_finalizer(svc)  # nothing holds its deletion
    cond = lb.condition(svc)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "Allocated")
    reasons = eventually(lambda: {e["reason"] for e in space.events("web")}, timeout=10)
    assert "AddressAllocated" in reasons
    want = {"total": "6", "used": "1", "free": "5"}
    eventually(lambda: lb.pool_status(kube, pool).get("ipv4") == want, timeout=SETTLE)
    ready = lb.pool_condition(kube, pool, "Ready")
    assert ready is not None
    assert ready["status"] == "True"


def test_lb02_dual_stack_gets_one_address_per_family(space: lb.Space, start_lb: StartLb) -> None:
    net = lb.block()
    space.pool([f"{net}.16/30", "fd00:18:1::/126"], allowFirstAndLast=True)
    start_lb()
    space.service("both", ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv6", "IPv4"])
    assert lb.allocated(space, "both", 2) == ["fd00:18:1::", f"{net}.16"]  # the listed order
    space.service("prefer", ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv4", "IPv6"])
    assert lb.allocated(space, "prefer", 2) == [f"{net}.17", "fd00:18:1::1"]
    space.service("six", ipFamilies=["IPv6"])
    assert lb.allocated(space, "six") == ["fd00:18:1::2"]


def test_lb02_prefer_dual_stack_takes_one_family_when_the_other_has_no_pool(
    space: lb.Space, start_lb: StartLb
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/30"])
    start_lb()
    space.service("prefer", ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv4", "IPv6"])
    assert lb.allocated(space, "prefer") == [f"{net}.1"]
    space.service("require", ipFamilyPolicy="RequireDualStack")
    cond = lb.refused(space, "require", "FamilyUnavailable")
    assert "IPv6" in str(cond["message"])


@pytest.mark.parametrize(
    "annotation",
    ["lb.local-ccm.io/ips", "metallb.io/loadBalancerIPs", "kube-vip.io/loadbalancerIPs", None],
)
def test_lb03_requested_address(space: lb.Space, start_lb: StartLb, annotation: str | None) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    start_lb()
    if annotation is None:
        space.service("asks", loadBalancerIP=f"{net}.9")
    else:
        space.service("asks", annotations={annotation: f"{net}.9"})
    assert lb.allocated(space, "asks") == [f"{net}.9"]
    space.service("next")
    assert lb.allocated(space, "next") == [f"{net}.1"]


def test_lb03_disagreeing_requests_are_refused_whole(space: lb.Space, start_lb: StartLb) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    start_lb()
    space.service("torn", annotations={"lb.local-ccm.io/ips": f"{net}.3"},
                  loadBalancerIP=f"{net}.4")  # fmt: skip
    cond = lb.refused(space, "torn", "ConflictingRequests")
    assert "spec.loadBalancerIP" in str(cond["message"])
    assert lb.ips(space.get("torn")) == []


def test_lb04_address_outside_every_pool_is_refused_with_an_event(
    space: lb.Space, start_lb: StartLb
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    start_lb()
    space.service("outside", annotations={"lb.local-ccm.io/ips": "192.0.2.77"})
    cond = lb.refused(space, "outside", "AddressNotInPool")
    assert cond["status"] == "False"
    assert "192.0.2.77" in str(cond["message"])
    assert lb.ips(space.get("outside")) == []
    assert not lb.has_finalizer(space.get("outside"))
    warnings = eventually(
        lambda: [e for e in space.events("outside") if e["reason"] == "AddressNotInPool"],
        timeout=10,
    )
    assert warnings[0]["type"] == "Warning"
    # fixed by the user: the request changes to an address of the pool
    svc = space.get("outside")
    svc["metadata"]["annotations"]["lb.local-ccm.io/ips"] = f"{net}.5"
    space.kube.update(SERVICES, svc, namespace=space.name)
    assert lb.allocated(space, "outside") == [f"{net}.5"]


def test_lb05_sharing_by_key_when_ports_differ_and_never_when_they_clash(
    space: lb.Space, start_lb: StartLb
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    start_lb()
    key = {"lb.local-ccm.io/sharing-key": "front"}
    space.service("http", ports=[80], annotations=key)
    first = lb.allocated(space, "http")
    space.service("dns", ports=[("UDP", 53)], annotations={"metallb.io/allow-shared-ip": "front"})
    assert lb.allocated(space, "dns") == first  # same key, other ports: one address
    space.service("http2", ports=[80], annotations=key)
    second = lb.allocated(space, "http2")
    assert second != first  # same key, same port: its own address
    space.service("asks-clash", ports=[80], annotations={**key, "lb.local-ccm.io/ips": first[0]})
    cond = lb.refused(space, "asks-clash", "SharingPortClash")
    assert first[0] in str(cond["message"])
    space.service("asks-nokey", ports=[8443], annotations={"lb.local-ccm.io/ips": first[0]})
    lb.refused(space, "asks-nokey", "AddressInUse")
    assert lb.ips(space.get("asks-nokey")) == []


def test_lb06_class_filtering(space: lb.Space, start_lb: StartLb) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    start_lb("--lb-classless=false", "--lb-class=example.com/ours")
    space.service("ours", loadBalancerClass="example.com/ours")
    space.service("classless")
    space.service("theirs", loadBalancerClass="example.com/other")
    space.service("plain", ports=[80], type="ClusterIP")
    assert lb.allocated(space, "ours") == [f"{net}.1"]
    for name in ("classless", "theirs", "plain"):
        svc = space.get(name)
        assert lb.ips(svc) == []
        assert not lb.has_finalizer(svc)
        assert lb.condition(svc) is None


def test_lb06_classless_served_by_default(space: lb.Space, start_lb: StartLb) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    start_lb()
    space.service("classless")
    space.service("ours", loadBalancerClass="lb.local-ccm.io/pools")
    space.service("theirs", loadBalancerClass="example.com/other")
    assert lb.allocated(space, "classless") == [f"{net}.1"]
    assert lb.allocated(space, "ours") == [f"{net}.2"]
    assert not lb.has_finalizer(space.get("theirs"))


def test_lb07_exhaustion_then_recovery_on_release(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    pool = space.pool([f"{net}.4/30"])  # .5 and .6
    start_lb()
    space.service("a")
    space.service("b")
    held = {lb.allocated(space, "a")[0], lb.allocated(space, "b")[0]}
    assert held == {f"{net}.5", f"{net}.6"}
    space.service("c")
    cond = lb.refused(space, "c", "PoolExhausted")
    assert pool in str(cond["message"])
    eventually(lambda: lb.pool_status(kube, pool).get("ipv4", {}).get("free") == "0",
               timeout=SETTLE)  # fmt: skip
    freed = lb.ips(space.get("a"))[0]
    kube.delete(SERVICES, "a", namespace=space.name)
    assert lb.gone(kube, space.name, "a"), "no finalizer holds it"
    assert lb.allocated(space, "c") == [freed]
    cond_c = lb.condition(space.get("c"))
    assert cond_c is not None
    assert cond_c["status"] == "True"


def test_lb07_type_change_clears_status_and_releases(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.4/31"], allowFirstAndLast=True)  # .4 and .5
    start_lb()
    space.service("a")
    space.service("b")
    assert lb.allocated(space, "a") == [f"{net}.4"]
    lb.allocated(space, "b")
    space.service("c")
    lb.refused(space, "c", "PoolExhausted")
    kube.patch(SERVICES, "a", {"spec": {"type": "ClusterIP"}}, patch_type="merge",
               namespace=space.name)  # fmt: skip

    def cleaned() -> bool:  # the apiserver may clear the ingress itself; ours is the condition
        svc = space.get("a")
        return not lb.ips(svc) and (lb.condition(svc) or {}).get("reason") == "Released"

    eventually(cleaned, timeout=SETTLE, message="status cleared")
    assert not lb.has_finalizer(space.get("a"))
    assert lb.allocated(space, "c") == [f"{net}.4"]
    released = eventually(
        lambda: [e["message"] for e in space.events("a") if e["reason"] == "AddressReleased"],
        timeout=10,
        message="an AddressReleased Event on a",
    )
    assert released == [f"released {net}.4: no longer a LoadBalancer this controller serves"]


def test_lb07_type_change_of_a_classed_service_clears_status_and_releases(
    space: lb.Space, start_lb: StartLb
) -> None:
    """The apiserver clears the class with the type: what we wrote still marks it as ours."""
    net = lb.block()
    space.pool([f"{net}.4/32"], allowFirstAndLast=True)
    start_lb("--lb-classless=false", "--lb-class=example.com/ours")
    space.service("a", loadBalancerClass="example.com/ours")
    assert lb.allocated(space, "a") == [f"{net}.4"]
    space.service("b", loadBalancerClass="example.com/ours")
    lb.refused(space, "b", "PoolExhausted")
    space.kube.patch(SERVICES, "a", {"spec": {"type": "ClusterIP"}}, patch_type="merge",
                     namespace=space.name)  # fmt: skip
    assert space.get("a")["spec"].get("loadBalancerClass") is None, "the class kept"

    def cleaned() -> Obj | None:
        cond = lb.condition(svc := space.get("a"))
        return svc if not lb.ips(svc) and (cond or {}).get("reason") == "Released" else None

    eventually(cleaned, timeout=SETTLE, message="status cleared")
    assert lb.allocated(space, "b") == [f"{net}.4"]


def scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


def sample(text: str, name: str, labels: dict[str, str]) -> float | None:
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    return None


def test_lb15_readiness_and_metrics(space: lb.Space, start_lb: StartLb) -> None:
    net = lb.block()
    pool = space.pool([f"{net}.0/29"])
    metrics, health = free_port(), free_port()
    start_lb(f"--metrics-bind-address=127.0.0.1:{metrics}", "--metrics-secure=false",
             f"--health-probe-bind-address=127.0.0.1:{health}")  # fmt: skip
    eventually(lambda: scrape(health, "/readyz")[0] == 200, timeout=SETTLE, message="ready")
    space.service("web")
    lb.allocated(space, "web")
    used = {"pool": pool, "family": "IPv4", "state": "used"}

    def counted() -> str | None:
        text = scrape(metrics, "/metrics")[1]
        return text if sample(text, "local_ccm_lb_pool_addresses", used) == 1 else None

    text = eventually(counted, timeout=SETTLE, message="pool usage exported")
    free = sample(text, "local_ccm_lb_pool_addresses", {**used, "state": "free"})
    assert free == 5
    assert sample(text, "local_ccm_lb_allocation_latency_seconds_count", {}) == 1
    assert sample(text, "local_ccm_lb_allocations_total", {"result": "allocated"}) == 1
