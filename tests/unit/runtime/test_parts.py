"""What every controller builds alike (`runtime.parts`): the last writes a sync decides on while
the cache lags them, and each controller's work queue series under its queue's name."""

from __future__ import annotations

from typing import Any

from local_ccm.bmc.metrics import BmcMetrics
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.runtime.parts import LastWrites


def obj(version: str, mark: str = "") -> dict[str, Any]:
    return {"metadata": {"name": "a", "resourceVersion": version}, "mark": mark}


def test_a_write_is_decided_on_until_the_cache_shows_a_newer_version() -> None:
    last = LastWrites()
    assert last.fresh("a", obj("1")) == obj("1")  # nothing written: the cache
    last.wrote("a", obj("1"), obj("2", "answer"))
    assert last.fresh("a", obj("1")) == obj("2", "answer")  # the cache lags the write
    assert last.fresh("a", obj("2", "cache")) == obj("2", "cache")  # caught up: forgotten
    assert last.fresh("a", obj("1")) == obj("1")


def test_successive_writes_replace_every_version_before_them() -> None:
    last = LastWrites()
    last.wrote("a", obj("1"), obj("2"))
    last.wrote("a", last.fresh("a", obj("1")) or {}, obj("3", "answer"))
    assert last.fresh("a", obj("1")) == obj("3", "answer")  # still the first version cached
    assert last.fresh("a", obj("2")) == obj("3", "answer")


def test_a_deleted_or_forgotten_object_has_no_last_write() -> None:
    last = LastWrites()
    last.wrote("a", obj("1"), obj("2"))
    assert last.fresh("a", None) is None
    assert last.fresh("a", obj("1")) == obj("1")
    last.wrote("b", obj("1"), obj("2"))
    last.forget("b")
    assert last.fresh("b", obj("1")) == obj("1")


def test_each_controllers_queue_is_named_as_before() -> None:
    names = {
        metrics.controller: (metrics.queue.name, metrics.queue.controller)
        for metrics in (CsrMetrics(), IpamMetrics(), LbMetrics(), LifecycleMetrics(), BmcMetrics())
    }
    assert names == {
        "kubelet-serving-approver": ("csr", "kubelet-serving-approver"),
        "node-ipam": ("node-ipam", "node-ipam"),
        "service-lb-ipam": ("service-lb-ipam", "service-lb-ipam"),
        "node-lifecycle": ("node-lifecycle", "node-lifecycle"),
        "node-bmc": ("node-bmc", "node-bmc"),
    }
