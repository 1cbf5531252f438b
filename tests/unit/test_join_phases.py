"""The join benchmark's pure parts (tests/bench/join_phases.py): parsing containerd's and the
CRI log's time stamps, the timeline of a join from its recorded events, the phases, and the
objects the benchmark writes."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from local_ccm.names import UNINITIALIZED_TAINT
from tests.bench import join_phases as jp
from tests.bench.compare_stats import JOIN_PHASES

T0 = datetime(2026, 12, 2, 14, 0, 0, tzinfo=UTC).timestamp()
TAINT = {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def node(*taints: dict[str, str], created: str = "2026-12-02T14:00:01Z") -> dict[str, Any]:
    return {"metadata": {"name": "n1", "uid": "u1", "creationTimestamp": created},
            "spec": {"taints": list(taints)}}  # fmt: skip


def pod(owner: str, *, bound: bool = False, cid: str = "", running: bool = False) -> dict[str, Any]:
    state = {"running": {"startedAt": "2026-12-02T14:00:03Z"}} if running else {"waiting": {}}
    statuses = [{"name": "agent", "state": state, **({"containerID": cid} if cid else {})}]
    owners = [{"kind": "DaemonSet", "name": owner}]
    return {
        "metadata": {"name": f"{owner}-x", "ownerReferences": owners},
        "spec": {"nodeName": "n1"} if bound else {},
        "status": {"containerStatuses": statuses} if cid or running else {},
    }  # fmt: skip


def test_ctr_event_lines_carry_containerd_s_nanosecond_time_topic_and_payload() -> None:
    line = ('2026-12-02 14:00:03.123456789 +0000 UTC k8s.io /tasks/start '
            '{"container_id":"abc","pid":4242}')  # fmt: skip
    event = jp.parse_ctr_event(line, json.loads)
    assert event is not None
    assert event.at == pytest.approx(T0 + 3.123456789, abs=1e-6)
    assert (event.topic, event.payload) == ("/tasks/start", {"container_id": "abc", "pid": 4242})
    whole = jp.parse_ctr_event('2026-12-02 16:00:03 +0200 CEST k8s.io /tasks/exit {"a":1}',
                               json.loads)  # fmt: skip
    assert whole is not None
    assert whole.at == T0 + 3  # the offset counts, the zone name does not
    assert jp.parse_ctr_event("# ctr --address /n/c.sock events", json.loads) is None


def test_the_kubelet_saw_the_pod_at_its_first_sync_loop_add_in_local_time() -> None:
    log = "\n".join([
        'I1202 14:00:01.000001    1174 apiserver.go:41] "Waiting for node sync before watching '
        'apiserver pods"',
        'I1202 14:00:01.250000    1174 kubelet.go:2760] "SyncLoop ADD" source="api" '
        'pods=["kube-system/other-x"]',
        'I1202 15:00:02.500000    1174 kubelet.go:2760] "SyncLoop ADD" source="api" '
        'pods=["kube-system/local-ccm-x"]',
        'I1202 15:00:09.000000    1174 kubelet.go:2760] "SyncLoop ADD" source="api" '
        'pods=["kube-system/local-ccm-x"]',
    ])  # fmt: skip
    at = jp.kubelet_saw_pod(log, "local-ccm-x", year=2026, utc_offset=3600)
    assert at == pytest.approx(T0 + 2.5)  # 15:00 at UTC+1 is 14:00 UTC
    assert jp.kubelet_saw_pod(log, "gone-x", year=2026, utc_offset=0) is None


def test_rfc3339_times_keep_their_fraction_and_offset() -> None:
    assert jp.parse_rfc3339("2026-12-02T14:00:01Z") == T0 + 1
    assert jp.parse_rfc3339("2026-12-02T15:00:01.5+01:00") == T0 + 1.5
    assert jp.parse_cri_log_time("2026-12-02T14:00:03.250000001Z stderr F starting") == (
        pytest.approx(T0 + 3.25, abs=1e-6)
    )
    assert jp.parse_cri_log_time("garbage") is None
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        jp.parse_rfc3339("yesterday")


def test_the_timeline_follows_the_node_the_pod_of_the_right_daemonset_and_the_tasks() -> None:
    nodes = [
        jp.Seen(T0 + 1.2, "ADDED", node(TAINT, NOT_READY)),
        jp.Seen(T0 + 1.4, "MODIFIED", node(TAINT, NOT_READY)),
        jp.Seen(T0 + 4.0, "MODIFIED", node(NOT_READY)),
        jp.Seen(T0 + 4.1, "MODIFIED", node()),
    ]
    pods = [
        jp.Seen(T0 + 1.3, "ADDED", pod("local-ccm")),
        jp.Seen(T0 + 1.35, "ADDED", pod("other")),  # another DaemonSet's: not this join's
        jp.Seen(T0 + 1.5, "MODIFIED", pod("local-ccm", bound=True)),
        jp.Seen(T0 + 4.5, "MODIFIED", pod("local-ccm", bound=True, cid="containerd://c1",
                                           running=True)),
    ]  # fmt: skip
    tasks = [
        jp.TaskEvent(T0 + 1.0, "/tasks/start", {"container_id": "old"}),
        jp.TaskEvent(T0 + 2.0, "/tasks/start", {"container_id": "sandbox"}),
        jp.TaskEvent(T0 + 2.1, "/tasks/create", {"container_id": "c1"}),
        jp.TaskEvent(T0 + 2.5, "/tasks/start", {"container_id": "c1"}),
    ]
    line = jp.timeline(kubelet_started=T0, nodes=nodes, pods=pods, daemonset="local-ccm",
                       tasks=tasks, first_log=T0 + 2.9)  # fmt: skip
    assert (line.registered, line.creation_timestamp, line.untainted) == (T0 + 1.2, T0 + 1, T0 + 4)
    assert (line.pod_created, line.pod_bound, line.pod_running) == (T0 + 1.3, T0 + 1.5, T0 + 4.5)
    assert (line.sandbox_started, line.container_started) == (T0 + 2.0, T0 + 2.5)
    assert (line.pod, line.container) == ("local-ccm-x", "c1")
    p = jp.phases(replace(line, kubelet_saw_pod=T0 + 1.8))
    assert p["registered_to_pod_created_s"] == 0.1
    assert p["pod_created_to_bound_s"] == 0.2
    assert p["bound_to_kubelet_saw_pod_s"] == 0.3
    assert p["kubelet_saw_pod_to_sandbox_started_s"] == 0.2
    assert p["sandbox_to_container_started_s"] == 0.5
    assert p["container_started_to_untainted_s"] == 1.5
    assert p["registered_to_untainted_s"] == 2.8
    chain = [v for _, v in list(p.items())[:6]]  # one after the other: they add up to the total
    assert sum(v for v in chain if v is not None) == pytest.approx(2.8)
    assert p["kubelet_start_to_registered_s"] == 1.2
    assert p["container_started_to_first_log_s"] == 0.4
    assert p["creation_timestamp_to_untainted_s"] == 3.0
    assert p["registered_to_pod_running_reported_s"] == 3.3
    assert jp.metric_values({"phases": p}) == {
        "join_register_to_untaint_s": 2.8, "join_container_to_untaint_s": 1.5,
    }  # fmt: skip


def test_what_was_not_seen_stays_none() -> None:
    nodes = [jp.Seen(T0 + 1, "ADDED", node(TAINT))]
    line = jp.timeline(kubelet_started=T0, nodes=nodes, pods=[], daemonset="local-ccm")
    assert (line.untainted, line.pod_created, line.container_started) == (None, None, None)
    p = jp.phases(line)
    assert p["kubelet_start_to_registered_s"] == 1.0
    assert p["registered_to_untainted_s"] is None


def test_a_daemonset_is_pointed_at_one_hostname_or_at_none() -> None:
    patch = jp.selector_patch("lcrn-1-1")
    assert patch == {"spec": {"template": {"spec": {"nodeSelector": {
        "kubernetes.io/hostname": "lcrn-1-1"}}}}}  # fmt: skip
    ds = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2}, **patch}
    assert jp.selects(ds, "lcrn-1-1")
    assert not jp.selects(ds, "lcrn-1-2")
    assert not jp.observed(ds)
    assert jp.observed({**ds, "status": {"observedGeneration": 3}})
    nowhere = jp.selector_patch(None)["spec"]["template"]["spec"]["nodeSelector"]
    assert nowhere == {"kubernetes.io/hostname": jp.NOWHERE}


def test_both_charts_get_the_same_resources_and_write_the_same_addresses() -> None:
    ours = jp.our_values(("local-ccm.test/local-ccm", "v1"), "192.0.2.126")
    go = jp.go_values(("local-ccm.test/go-local-ccm", "abc"), "192.0.2.126")
    assert ours["image"] == {"repository": "local-ccm.test/local-ccm", "tag": "v1",
                             "pullPolicy": "Never"}  # fmt: skip
    assert go["image"]["pullPolicy"] == "Never"
    # the Go chart's own 100m CPU limit is deleted (null), the rest is ours
    assert go["resources"]["limits"] == {"cpu": None, "memory": "64Mi"}
    assert ours["resources"] == {"requests": go["resources"]["requests"],
                                 "limits": {"memory": "64Mi"}}  # fmt: skip
    # InternalIP only: ours with no ExternalIP target; Go drops an ExternalIP equal to it
    assert ours["ipDetection"] == {"internalIPTarget": "192.0.2.126", "externalIPTarget": ""}
    assert go["ipDetection"] == {"internalIPTarget": "192.0.2.126",
                                 "externalIPTarget": "192.0.2.126"}  # fmt: skip
    assert go["serviceAccount"]["name"] != "local-ccm"  # ours is local-ccm, same namespace
    assert "apiServer" not in ours  # in-cluster, through the kubernetes Service, as Go


def test_joins_alternate_between_the_agents() -> None:
    assert jp.join_order(2) == ["ours", "go", "ours", "go"]
    assert jp.join_order(0) == []


def test_the_docs_table_names_only_phases_a_join_has() -> None:
    assert {key for key, _ in JOIN_PHASES} <= {name for name, _, _ in jp.PHASES}
    assert [key for key, _ in JOIN_PHASES][:7] == [name for name, _, _ in jp.PHASES][:7]
