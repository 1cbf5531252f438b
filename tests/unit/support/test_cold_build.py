"""A first run builds only what it starts, and a cold build says how far it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import binaries, gobuild, recipes
from tests.support.gotool import GoInfo

pytestmark = pytest.mark.unit

PINS = gobuild.Pins(
    "v1.37.1", "v1.30.14", "v3.6.16", "v0.8.0", "v4.3.1", "v3.1.3", "v1.7.12", "v0.316.0"
)


def _context(cache: Path) -> recipes.Context:
    go = GoInfo("go1.26.8", "linux", "amd64", cache / "mod", cache / "gocache")
    return recipes.Context(cache, {}, go, PINS, lambda _line: None)


def test_a_cold_cache_builds_only_the_apiserver_when_only_it_is_wanted(tmp_path: Path) -> None:
    unit = recipes.UNITS["kubernetes"]
    narrowed = binaries._narrowest(_context(tmp_path), unit, ["kube-apiserver"])
    assert narrowed.binaries == ("kube-apiserver",)
    assert narrowed.name == unit.name  # same scratch module, so a later full build reuses it


def test_wanting_every_binary_of_a_unit_builds_the_whole_unit(tmp_path: Path) -> None:
    unit = recipes.UNITS["kubernetes"]
    wanted = ["kube-controller-manager", "kube-apiserver"]
    assert binaries._narrowest(_context(tmp_path), unit, wanted) is unit


def test_package_lines_are_told_from_compiler_output() -> None:
    assert gobuild.is_package_line("k8s.io/api/core/v1")
    assert gobuild.is_package_line("internal/goarch")
    assert not gobuild.is_package_line("# k8s.io/kubernetes/pkg/foo")
    assert not gobuild.is_package_line("pkg/foo/bar.go:12:3: undefined: x")
    assert not gobuild.is_package_line("go: downloading k8s.io/api v0.37.1")
    assert not gobuild.is_package_line("")


def test_progress_extrapolates_the_rate_and_quotes_the_measured_cold_build() -> None:
    text = gobuild.progress_text("kubernetes v1.37.1", 500, 2000, 150.0, 570.0)
    assert text == (
        "kubernetes v1.37.1: 500/2000 packages compiled (25 %), 2m30s elapsed, "
        "about 7m30s left at this rate, a cold build took 9m30s on 2 cores"
    )


def test_progress_without_a_package_total_counts_and_times_only() -> None:
    text = gobuild.progress_text("helm v4.3.1", 42, 0, 31.0, None)
    assert text == "helm v4.3.1: 42 packages compiled, 31s elapsed"


def test_the_notice_before_a_cold_build_says_what_it_costs() -> None:
    assert gobuild.cold_build_notice("etcd", 70) == (
        "etcd: not in the cache, building it now; a cold build took about 1m10s "
        "on a 2-core machine (progress every 30 s)"
    )
    assert "progress every 30 s" in gobuild.cold_build_notice("x", None)
