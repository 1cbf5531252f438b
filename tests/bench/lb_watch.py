"""What the LoadBalancer comparison watches while a run goes on: the run's Services through
one admin watch (who holds which address, at every moment) and the controller's requests
through the apiserver's audit log, read as it grows.

`AddressBook` is pure (fed by the watcher thread, unit-tested alone); `ServiceWatch` and
`AuditTail` are the thin readers around it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client, Obj, WatchStream
from local_ccm.kube.errors import Gone, Transient
from local_ccm.lbipam.api import SERVICES

KUBEVIP_ANNOTATION = "kube-vip.io/loadbalancerIPs"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
WATCH_S = 240  # one watch request; the watcher resumes from the last resourceVersion
MAX_KEPT = 50  # incidents kept in the result file (all are counted)


# ------------------------------------------------------------------ pure
def addresses(impl: str, svc: Obj) -> tuple[str, ...]:
    """The addresses a Service shows: status.loadBalancer.ingress, or for
    kube-vip-cloud-provider (which leaves the status to kube-vip) its annotation."""
    if impl == "kube-vip-cp":
        raw = (svc.get("metadata", {}).get("annotations") or {}).get(KUBEVIP_ANNOTATION, "")
        return tuple(a for a in str(raw).split(",") if a)
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return tuple(str(e["ip"]) for e in ingress if e.get("ip"))


def wanted(svc: Obj) -> int:
    """Addresses a Service asks for: one per family of a dual-stack cluster's PreferDualStack."""
    return 2 if (svc.get("spec") or {}).get("ipFamilyPolicy") == "PreferDualStack" else 1


@dataclass(frozen=True)
class Incident:
    kind: str  # "duplicate": one address on two live Services; "changed": an address taken away
    address: str
    services: tuple[str, ...]
    at: float  # monotonic


@dataclass
class AddressBook:
    """Every state the watch showed, folded: the addresses each live Service holds, when it
    first held all it asked for, when it was gone, and every incident. A duplicate is an
    address shown on two Services that both exist (a Service being deleted still exists);
    a change is an address a live Service held and then no longer (moved or cleared)."""

    held: dict[str, tuple[str, ...]] = field(default_factory=dict)
    holders: dict[str, set[str]] = field(default_factory=dict)
    addressed_at: dict[str, float] = field(default_factory=dict)
    gone_at: dict[str, float] = field(default_factory=dict)
    duplicates: int = 0
    changed: int = 0
    incidents: list[Incident] = field(default_factory=list)

    def seen(self, name: str, found: tuple[str, ...], want: int, at: float) -> None:
        old = self.held.get(name, ())
        if set(old) != set(found):
            for lost in sorted(set(old) - set(found)):
                self.changed += 1
                self._note(Incident("changed", lost, (name,), at))
            self._release(name, old)
            self._hold(name, found, at)
        elif name not in self.held:
            self.held[name] = found
        if len(set(found)) >= want and name not in self.addressed_at:
            self.addressed_at[name] = at

    def gone(self, name: str, at: float) -> None:
        self._release(name, self.held.pop(name, ()))
        self.gone_at[name] = at

    def resync(self, found: dict[str, tuple[tuple[str, ...], int]], at: float) -> None:
        """A fresh LIST after the watch was lost: what is missing is gone, the rest seen."""
        for name in set(self.held) - set(found):
            self.gone(name, at)
        for name, (addrs, want) in found.items():
            self.seen(name, addrs, want, at)

    @property
    def live(self) -> int:
        return len(self.held)

    def _hold(self, name: str, found: tuple[str, ...], at: float) -> None:
        self.held[name] = found
        for address in set(found):
            others = self.holders.setdefault(address, set())
            if others:
                self.duplicates += 1
                self._note(Incident("duplicate", address, tuple(sorted(others | {name})), at))
            others.add(name)

    def _release(self, name: str, old: tuple[str, ...]) -> None:
        for address in set(old):
            others = self.holders.get(address, set())
            others.discard(name)
            if not others:
                self.holders.pop(address, None)

    def _note(self, incident: Incident) -> None:
        if len(self.incidents) < MAX_KEPT:
            self.incidents.append(incident)

    def summary(self, since: float) -> dict[str, Any]:
        """The counts and the first incidents, times relative to `since`."""
        return {
            "duplicates": self.duplicates, "changed": self.changed,
            "incidents": [{**asdict(i), "at": round(i.at - since, 3)} for i in self.incidents],
        }  # fmt: skip


# ------------------------------------------------------------------ the watch
class ServiceWatch:
    """A thread watching one namespace's Services into an `AddressBook` (under `lock`)."""

    def __init__(self, kubeconfig: Path, namespace: str, impl: str) -> None:
        self.book = AddressBook()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self._kubeconfig, self._namespace, self._impl = kubeconfig, namespace, impl
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{namespace}", daemon=True)

    def __enter__(self) -> ServiceWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=30)

    def read(self, what: Callable[[AddressBook], Any]) -> Any:
        with self.lock:
            return what(self.book)

    def _run(self) -> None:
        with Client.from_kubeconfig(self._kubeconfig, field_manager="lb-bench-watch") as kube:
            version: str | None = None
            while not self._stop.is_set():
                try:
                    version = version or self._resync(kube)
                    self._stream = kube.watch(
                        SERVICES,
                        namespace=self._namespace,
                        resource_version=version,
                        timeout_seconds=WATCH_S,
                    )
                    for event in self._stream:
                        version = self._apply(event.type, event.object) or version
                except Gone:
                    version = None
                except (Transient, OSError) as exc:
                    if not self._stop.is_set():
                        self.errors.append(f"{time.monotonic():.1f} {exc!r}"[:300])
                        time.sleep(0.2)

    def _resync(self, kube: Client) -> str:
        found, token = {}, None
        while True:
            page = kube.list(SERVICES, namespace=self._namespace, limit=1000, continue_token=token)
            for svc in page["items"]:
                found[svc["metadata"]["name"]] = (addresses(self._impl, svc), wanted(svc))
            token = page["metadata"].get("continue") or None
            if token is None:
                break
        with self.lock:
            self.book.resync(found, time.monotonic())
        return str(page["metadata"]["resourceVersion"])

    def _apply(self, kind: str, obj: Obj) -> str | None:
        meta = obj.get("metadata") or {}
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            now = time.monotonic()
            with self.lock:
                if kind == "DELETED":
                    self.book.gone(meta["name"], now)
                else:
                    self.book.seen(meta["name"], addresses(self._impl, obj), wanted(obj), now)
        return meta.get("resourceVersion")


# ------------------------------------------------------------------ the audit log
@dataclass(frozen=True)
class Request:
    at: float  # epoch seconds, requestReceivedTimestamp
    verb: str
    resource: str


class AuditTail:
    """The requests (stage RequestReceived) of users whose name starts with `prefix`, read from
    the audit log as it grows: a whole read per question would parse it all every time."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path = path
        self.by_user: dict[str, list[Request]] = {}
        self._needle = b'"username":"' + prefix.encode()
        self._offset = 0
        self._rest = b""

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if self._needle in line and b'"stage":"RequestReceived"' in line:
                self._add(json.loads(line))

    def _add(self, raw: dict[str, Any]) -> None:
        ref = raw.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource")
                                               else "")  # fmt: skip
        at = datetime.fromisoformat(raw["requestReceivedTimestamp"]).timestamp()
        user = raw["user"]["username"]
        self.by_user.setdefault(user, []).append(Request(at, raw["verb"], resource))

    def requests(self, user: str, since: float, until: float | None = None) -> list[Request]:
        self.poll()
        return [r for r in self.by_user.get(user, [])
                if r.at >= since and (until is None or r.at < until)]  # fmt: skip

    def last(self, user: str) -> float | None:
        self.poll()
        found = self.by_user.get(user)
        return found[-1].at if found else None


def count(requests: list[Request], verbs: frozenset[str] | None = None) -> int:
    """Requests with one of `verbs` (all: None). An access review (`create
    selfsubjectrulesreviews` ...) is a question, never stored: not a write."""
    if verbs is None:
        return len(requests)
    return sum(1 for r in requests if r.verb in verbs and not r.resource.endswith("reviews"))
