"""Test tiers from the directory layout, and their default timeouts.
Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

TIER_DIRS = {"unit": "unit", "netns": "netns", "integration": "integration", "bench": "bench"}
DEFAULT_TIMEOUT = {"unit": 5.0, "netns": 30.0, "integration": 60.0, "bench": 900.0}
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
    if "kcm" in marks or names & {"kcm", "node_lifecycle_plane"}:
        needs.add("kube-controller-manager")
    if "kwok" in marks or "kwok" in names:
        needs.add("kwok")
    if "helm_binary" in names:
        needs.add("helm")
    return needs


def strict_tiers(require_all_tiers: bool, environ_ci: str | None) -> bool:
    """Under CI=true or --require-all-tiers a tier that cannot run is an error, not a skip."""
    return require_all_tiers or (environ_ci or "").lower() == "true"
