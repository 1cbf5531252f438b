"""The approver's API: the CSRs' list and watch (kubelet-serving ones only), one CSR read,
the `approval` subresource write, and Events. Errors arrive as `local_ccm.kube.errors`."""

from __future__ import annotations

from typing import Any, Final, Protocol

from local_ccm.csr.core.decide import Decision
from local_ccm.csr.core.model import SIGNER
from local_ccm.kube.aio import KubeListWatch, ObservedApi
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.resources import EVENTS, Resource

Obj = dict[str, Any]
CSRS: Final = Resource(
    "certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False
)
FIELD_SELECTOR: Final = f"spec.signerName={SIGNER}"
CONDITION: Final = {"approve": "Approved", "deny": "Denied"}
REASON: Final = {"approve": "KubeletServingApproved", "deny": "KubeletServingDenied"}


class CsrApi(Protocol):
    def list_watch(self) -> ListWatch: ...
    async def get_csr(self, name: str) -> Obj: ...
    async def update_approval(self, csr: Obj) -> Obj: ...
    async def create_event(self, namespace: str, body: Obj) -> Obj: ...


def with_condition(csr: Obj, decision: Decision, now: str) -> Obj:
    """`csr` (as read: its resourceVersion guards the write) with one more condition."""
    status = dict(csr.get("status") or {})
    condition = {
        "type": CONDITION[decision.kind], "status": "True", "reason": REASON[decision.kind],
        "message": decision.message, "lastUpdateTime": now, "lastTransitionTime": now,
    }  # fmt: skip
    status["conditions"] = [*(status.get("conditions") or ()), condition]
    return {**csr, "status": status}


class KubeCsrApi(ObservedApi):
    """`CsrApi` on the project's REST client (`ObservedApi`: request counting, write timeout)."""

    def list_watch(self) -> ListWatch:
        return KubeListWatch(self.client, CSRS, field_selector=FIELD_SELECTOR)

    async def get_csr(self, name: str) -> Obj:
        return await self._call("GET", CSRS.plural, self.client.get(CSRS, name))

    async def update_approval(self, csr: Obj) -> Obj:
        update = self.client.update(CSRS, csr, subresource="approval",
                                    timeout=self.write_timeout)  # fmt: skip
        return await self._call("PUT", "certificatesigningrequests/approval", update)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        event = self.client.create(EVENTS, body, namespace=namespace, timeout=self.write_timeout)
        return await self._call("POST", EVENTS.plural, event)
