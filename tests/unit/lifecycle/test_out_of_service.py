"""The optional out-of-service taint: decisions and JSON Patches."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from local_ccm.lifecycle.core.model import OUT_OF_SERVICE_ANNOTATION
from local_ccm.lifecycle.core.outofservice import (
    add_out_of_service_patch,
    plan_out_of_service,
    remove_out_of_service_patch,
)
from local_ccm.runtime.events import rfc3339 as format_time
from tests.fakes.lifecycle import AUTOSCALER, NOW, raw_node

OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
STAMP = format_time(NOW)
TEST_RV = {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}


def decide(obj: dict[str, Any], **kwargs: Any) -> tuple[str, bool]:
    options: dict[str, Any] = {"now": NOW, "attachments": 1, "timeout": 300.0,
                               "recovered": False, "dry_run": False} | kwargs  # fmt: skip
    decision = plan_out_of_service(obj, **options)
    return decision.step, decision.would_taint


def tainted(applied: str = STAMP) -> dict[str, Any]:
    return raw_node(
        "w1", taints=(AUTOSCALER, OOS), annotations={OUT_OF_SERVICE_ANNOTATION: applied}
    )


def test_l31_first_step_taints_and_annotates_in_one_guarded_patch() -> None:
    obj = raw_node("w1", annotations={"a/b": "x"})
    decision = plan_out_of_service(
        obj, now=NOW, attachments=1, timeout=300.0, recovered=False, dry_run=False
    )
    assert decision.step == "taint"
    assert decision.patch == (
        TEST_RV,
        {"op": "add", "path": "/spec/taints/-", "value": OOS},
        {"op": "add", "path": "/metadata/annotations/local-ccm.io~1out-of-service-applied-at",
         "value": STAMP},
    )  # fmt: skip


def test_taint_patch_creates_missing_lists_and_maps() -> None:
    obj = raw_node("w1", taints=())
    assert add_out_of_service_patch(obj, NOW) == (
        TEST_RV,
        {"op": "add", "path": "/spec/taints", "value": [OOS]},
        {"op": "add", "path": "/metadata/annotations", "value": {OUT_OF_SERVICE_ANNOTATION: STAMP}},
    )


def test_an_existing_identical_taint_is_not_added_twice() -> None:
    obj = raw_node("w1", taints=(OOS,), annotations={})
    ops = add_out_of_service_patch(obj, NOW)
    assert [op["path"] for op in ops] == [
        "/metadata/resourceVersion", "/metadata/annotations/local-ccm.io~1out-of-service-applied-at"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "kwargs", "step"),
    [
        (tainted(), {}, "wait"),  # l31: a VolumeAttachment still names the Node
        (tainted(), {"attachments": 0}, "delete"),  # l31: it is gone
        (tainted(format_time(NOW - timedelta(seconds=300))), {}, "delete"),  # timeout
        (tainted(format_time(NOW - timedelta(seconds=299))), {}, "wait"),
        (tainted("garbage"), {}, "taint"),  # re-stamp an unreadable annotation
    ],
)
def test_l31_wait_for_volume_attachments_or_timeout(
    obj: dict[str, Any], kwargs: dict[str, Any], step: str
) -> None:
    assert decide(obj, **kwargs)[0] == step


def test_recovery_removes_only_our_taint_and_annotation() -> None:
    obj = tainted()
    decision = plan_out_of_service(
        obj, now=NOW, attachments=1, timeout=300.0, recovered=True, dry_run=False
    )
    assert decision.step == "remove"
    assert decision.patch == remove_out_of_service_patch(obj)
    assert decision.patch == (
        TEST_RV,
        {"op": "test", "path": "/spec/taints/1", "value": OOS},
        {"op": "remove", "path": "/spec/taints/1"},
        {"op": "remove", "path": "/metadata/annotations/local-ccm.io~1out-of-service-applied-at"},
    )


def test_recovery_never_removes_an_administrators_taint() -> None:
    obj = raw_node("w1", taints=(OOS,))  # no annotation: not ours
    assert decide(obj, recovered=True) == ("end", False)


def test_dry_run_never_taints_and_says_it_would() -> None:
    assert decide(raw_node("w1"), dry_run=True) == ("delete", True)
    assert decide(tainted(), dry_run=True) == ("delete", False)


@pytest.mark.parametrize(
    ("bmc", "step"),
    [(None, "taint"), ("off", "taint"), ("absent", "taint"), ("on", "bmc_not_off"),
     ("unknown", "bmc_not_off")],
)  # fmt: skip
def test_bm11_a_node_with_a_nodebmc_is_tainted_only_while_it_reads_off(
    bmc: str | None, step: str
) -> None:
    assert decide(raw_node("w1"), bmc=bmc)[0] == step
    assert decide(raw_node("w1"), bmc=bmc, dry_run=True)[0] == (
        "delete" if step == "taint" else step)  # fmt: skip


def test_once_tainted_the_wait_goes_on_whatever_the_bmc_reads_and_on_is_a_recovery() -> None:
    assert decide(tainted(), bmc="unknown") == ("wait", False)
    assert decide(tainted(), bmc="unknown", attachments=0) == ("delete", False)
    assert decide(tainted(), bmc="on", recovered=True)[0] == "remove"
