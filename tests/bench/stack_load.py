"""The trickle of the whole-stack bench (tests/bench/test_compare_stack.py), the same on both
planes: LoadBalancer Services created and deleted, kubelet-serving CSRs from Node identities,
and the checks that both stacks did their job (a CSR left unapproved, a live Service without
an address, or one address on two live Services fails the test: either the harness or a
controller is wrong).

"Addressed" means for ours `status.loadBalancer.ingress`; kube-vip-cloud-provider writes the
annotation `kube-vip.io/loadbalancerIPs` and leaves the status to kube-vip, which does not run
here. CSRs are created by impersonating the Node (`system:node:<name>` in `system:nodes`, as
its kubelet would be), for a kwok Node's own name and InternalIP, so both approvers approve
them: ours because they are the Node's, kubelet-csr-approver because the name matches its
`--provider-regex` and the address its `--provider-ip-prefixes`.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_ccm.csr.api import CSRS
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import NotFound
from local_ccm.lbipam.api import POOLS, SERVICES
from tests.support import resources as r
from tests.support.adminhttp import AdminHttp
from tests.support.controlplane import ControlPlane
from tests.support.csrs import csr_object, request_pem
from tests.support.kwok import loopback_address

NAMESPACE = "bench-stack"
POOL = "198.18.0.0/24"  # RFC 2544's benchmarking range: nothing routes it
KUBEVIP_ANNOTATION = "kube-vip.io/loadbalancerIPs"
NODE_GROUP = "system:nodes"


def kwok_name(i: int) -> str:
    return f"kwok-{i:05d}"


# ------------------------------------------------------------------ pure
def addresses(svc: Mapping[str, Any], impl: str) -> list[str]:
    """The addresses `impl`'s allocator gave the Service (see the module docstring)."""
    if impl == "go":
        note = (svc["metadata"].get("annotations") or {}).get(KUBEVIP_ANNOTATION) or ""
        return [a for a in note.split(",") if a]
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [str(e["ip"]) for e in ingress if e.get("ip")]


def duplicates(items: Sequence[Mapping[str, Any]], impl: str) -> list[str]:
    """Addresses held by two live Services (ones being deleted may still show theirs)."""
    live = [s for s in items if not s["metadata"].get("deletionTimestamp")]
    held = Counter(a for s in live for a in addresses(s, impl))
    return sorted(a for a, n in held.items() if n > 1)


def is_approved(csr: Mapping[str, Any]) -> bool:
    conditions = (csr.get("status") or {}).get("conditions") or []
    kinds = {c.get("type") for c in conditions if c.get("status", "True") == "True"}
    return "Approved" in kinds and "Denied" not in kinds


def service_body(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"type": "LoadBalancer",
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}  # fmt: skip


def kubevip_configmap() -> Obj:
    """kube-vip-cloud-provider's pools: one for every namespace, the same range as ours."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": {"cidr-global": POOL}}  # fmt: skip


def pool_body() -> Obj:
    return {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
            "metadata": {"name": "bench-stack"}, "spec": {"addresses": [POOL]}}  # fmt: skip


# ------------------------------------------------------------------ one plane's load
def create_as(http: AdminHttp, user: str, groups: list[str], path: str, body: Obj) -> Obj:
    """POST `body` as `user` in `groups` (impersonated by the admin certificate)."""
    ctx = ssl.create_default_context(cafile=str(http.ca_file))
    ctx.load_cert_chain(str(http.cert_file), str(http.key_file))
    conn = http_connection(http.port, ctx)
    try:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Impersonate-User": user}  # fmt: skip
        conn.putrequest("POST", path)
        for name, value in headers.items():
            conn.putheader(name, value)
        for group in groups:
            conn.putheader("Impersonate-Group", group)
        data = json.dumps(body).encode()
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        resp = conn.getresponse()
        answer = resp.read()
        if resp.status != 201:
            raise AssertionError(f"POST {path} as {user}: HTTP {resp.status}: {answer[:500]!r}")
        return dict(json.loads(answer))
    finally:
        conn.close()


def http_connection(port: int, ctx: ssl.SSLContext) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)


@dataclass
class PlaneLoad:
    """The Services and CSRs of one plane; `impl` says how its allocator addresses them."""

    impl: str
    plane: ControlPlane
    kube: Client
    nodes: int
    live: deque[str] = field(default_factory=deque)
    deleted: list[str] = field(default_factory=list)
    csrs: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    created: int = 0

    def create_service(self) -> None:
        name = f"lb-{self.created:05d}"
        self.kube.create(SERVICES, service_body(name), namespace=NAMESPACE)
        self.live.append(name)
        self.created += 1

    def delete_oldest(self) -> None:
        name = self.live.popleft()
        self.kube.delete(SERVICES, name, namespace=NAMESPACE)
        self.deleted.append(name)

    def submit_csr(self, k: int) -> None:
        """CSR `k` for kwok Node k·7 mod N (spread over the Nodes), as that Node."""
        i = (k * 7) % self.nodes
        node, name = kwok_name(i), f"stack-{k:05d}"
        pem = request_pem(node, ips=[loopback_address(i)], dns=[node])
        path = CSRS.path()
        create_as(self.plane.http, f"system:node:{node}", [NODE_GROUP], path,
                  csr_object(name, pem))  # fmt: skip
        self.csrs.append(name)

    def tick(self, k: int) -> None:
        """One step of the trickle: a Service in, the oldest out, a CSR; then the duplicate
        check over every Service."""
        self.create_service()
        self.delete_oldest()
        self.submit_csr(k)
        self.check_duplicates()

    def services(self) -> list[Obj]:
        return list(self.kube.list(SERVICES, namespace=NAMESPACE)["items"])

    def check_duplicates(self) -> None:
        self.duplicates += duplicates(self.services(), self.impl)

    # -------------------------------------------------------------- the end state
    def unaddressed(self) -> list[str]:
        held = {s["metadata"]["name"]: addresses(s, self.impl) for s in self.services()}
        return [name for name in self.live if not held.get(name)]

    def not_gone(self) -> list[str]:
        left = []
        for name in self.deleted:
            try:
                self.kube.get(SERVICES, name, namespace=NAMESPACE)
            except NotFound:
                continue
            left.append(name)
        return left

    def unapproved(self) -> list[str]:
        found = {c["metadata"]["name"]: c for c in self.kube.list(CSRS)["items"]}
        return [name for name in self.csrs if not is_approved(found.get(name, {}))]

    def problems(self) -> dict[str, list[str]]:
        """What is still wrong: empty lists when the stack did everything."""
        return {
            "unaddressed": self.unaddressed(),
            "not_gone": self.not_gone(),
            "unapproved": self.unapproved(),
            "duplicates": sorted(set(self.duplicates)),
        }

    def summary(self) -> dict[str, Any]:
        return {"services_live": len(self.live), "services_created": self.created,
                "services_deleted": len(self.deleted), "csrs": len(self.csrs)}  # fmt: skip


def create_namespace(kube: Client) -> None:
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": NAMESPACE}})  # fmt: skip
