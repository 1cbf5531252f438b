"""Another process leading a Lease, played by the test on a real API server: the holder renews
it every second until released, as a stopping client-go leader releases it (empty holder,
`leaseDurationSeconds: 1`)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from local_ccm.kube.client import Client
from tests.support import resources as r


class HeldLease:
    """The Lease `namespace`/`name`, created held by `holder` and renewed every second."""

    def __init__(self, kube: Client, namespace: str, name: str, holder: str) -> None:
        self.kube, self.namespace, self.name, self.holder = kube, namespace, name, holder
        self.stopped = threading.Event()
        kube.create(r.LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": name}, "spec": self._spec(holder, 4)},
                    namespace=namespace)  # fmt: skip
        self.thread = threading.Thread(target=self._renew, daemon=True)
        self.thread.start()

    @staticmethod
    def _spec(holder: str, duration: int) -> dict[str, Any]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {"holderIdentity": holder, "leaseDurationSeconds": duration,
                "acquireTime": now, "renewTime": now}  # fmt: skip

    def _write(self, spec: dict[str, Any]) -> None:
        lease = self.kube.get(r.LEASES, self.name, namespace=self.namespace)
        lease["spec"] = spec
        self.kube.update(r.LEASES, lease, namespace=self.namespace)

    def _renew(self) -> None:
        while not self.stopped.wait(1.0):
            self._write(self._spec(self.holder, 4))

    def release(self) -> None:
        """Stop renewing and release, as SIGTERM does."""
        self.stopped.set()
        self.thread.join(timeout=10)
        self._write(self._spec("", 1))

    def spec(self) -> dict[str, Any]:
        return dict(self.kube.get(r.LEASES, self.name, namespace=self.namespace)["spec"])
