"""Test tiers from the directory layout, and their default timeouts.
Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

TIER_DIRS = {
    "unit": "unit",
    "netns": "netns",
    "integration": "integration",
    "realnode": "realnode",
    "bench": "bench",
}
# In order of weight: the heaviest marker of a test decides what it needs. The real-node tier's
# node starts in module fixtures, which the timeout does not cover (timeout_func_only); a test
# itself may wait for a Pod to start and a Node to be initialised. Every timeout is a hang guard,
# never a speed check (speed is measured in the benchmarks): `make test` runs the unit tier beside
# real nodes and planes on two cores, where a test of 0.3 s here once took over 5 s.
DEFAULT_TIMEOUT = {
    "unit": 30.0,
    "netns": 30.0,
    "integration": 60.0,
    "realnode": 300.0,
    "bench": 900.0,
}
# What a real node needs besides a plane: the kubelet, the scheduler and KCM (taints, Pods of
# DaemonSets, certificate signing), helm for the chart, kubectl for the plain manifests and
# kube-proxy for Service traffic (the node's unit builds it with the kubelet).
REAL_NODE_COMPONENTS = frozenset({"etcd", "kube-apiserver", "kube-controller-manager", "kubelet",
                                  "kube-scheduler", "helm", "kubectl", "kube-proxy"})  # fmt: skip
# Starting kwok nodes or waiting for KCM's effects takes longer than a plain API round trip.
SLOW_MARKERS = ("kcm", "kwok")
SLOW_INTEGRATION_TIMEOUT = 120.0


def tier_of(parts: Sequence[str]) -> str | None:
    """The tier of a test file from its path parts relative to tests/ (None outside the tiers)."""
    return TIER_DIRS.get(parts[0]) if len(parts) > 1 else None


def default_timeout(tier: str, markers: Iterable[str]) -> float:
    if tier == "integration" and any(m in SLOW_MARKERS for m in markers):
        return SLOW_INTEGRATION_TIMEOUT
    return DEFAULT_TIMEOUT[tier]


def needed_components(
    tier: str | None, markers: Iterable[str], fixtures: Iterable[str]
) -> set[str]:
    """Binaries a selected test needs, from its tier, markers and fixture closure."""
    marks, names = set(markers), set(fixtures)
    needs: set[str] = set()
    if tier in ("integration", "bench") or names & {"control_plane", "node_lifecycle_plane"}:
        needs |= {"etcd", "kube-apiserver"}
    # `kubelet`: a real node outside tests/realnode (the join benchmark, tests/bench).
    if tier == "realnode" or "kubelet" in marks:
        needs |= REAL_NODE_COMPONENTS
    if "kcm" in marks or names & {"kcm", "node_lifecycle_plane"}:
        needs.add("kube-controller-manager")
    if "kwok" in marks or "kwok" in names:
        needs.add("kwok")
    if "helm_binary" in names:
        needs.add("helm")
    if "cosign_binary" in names:
        needs.add("cosign")
    if "actionlint_binary" in names:
        needs.add("actionlint")
    return needs


def strict_tiers(require_all_tiers: bool, environ_ci: str | None) -> bool:
    """Under CI=true or --require-all-tiers a tier that cannot run is an error, not a skip."""
    return require_all_tiers or (environ_ci or "").lower() == "true"
