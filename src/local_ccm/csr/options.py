"""kubelet-serving-approver's own flag and settings. Pure, no I/O."""

from __future__ import annotations

from typing import Final

from local_ccm.flags import Flag
from local_ccm.records import dataclass

NAME: Final = "kubelet-serving-approver"
DENY_FLAG: Final = "csr-deny"
FLAGS: Final = (
    Flag(DENY_FLAG, "bool", True, "kubelet-serving-approver: deny a kubelet serving CSR "
         "that fails a check; false leaves it pending (logged, with an Event).",
         env=("CSR_DENY",)),
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    deny: bool = True  # --csr-deny
    event_namespace: str = "default"  # Events about cluster-scoped objects live there
    instance: str = NAME
    backoff: tuple[float, float] = (0.5, 30.0)  # first and longest retry delay of a write
