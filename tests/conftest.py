"""Tiers, default timeouts and run-wide options. Fixtures live in
tests/support/fixtures.py (control plane) and tests/support/netns.py (network namespaces).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support import tiers

# pytest only honours pytest_plugins in this top-level conftest.
pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.netns",
    "tests.support.crds",
    "tests.support.agent_fixtures",
    "tests.support.sushy",
]
TESTS_DIR = Path(__file__).resolve().parent
# Tiers whose tests skip on a machine that cannot run them, and what such a machine needs.
STRICT_TIERS = {
    "realnode": "run as root on a cgroup v1 machine after `make setup` (containerd, runc, "
    "the CNI plugins, gcc).",
    "netns": "run as root with iproute2 installed.",
}

# Property tests assert behaviour, never speed: no per-example deadline (a loaded 2-core CI
# machine would otherwise fail them at random), and in CI the examples are derandomized so a
# red run can be reproduced from its log.
settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("local-ccm")
    group.addoption(
        "--require-all-tiers",
        action="store_true",
        help="a tier that cannot run (e.g. netns without root) is an error, not a skip; "
        "implied by CI=true",
    )
    group.addoption(
        "--keep-control-plane",
        action="store_true",
        help="leave etcd/apiserver running at the end and print the kubeconfig path",
    )
    group.addoption(
        "--keep-artifacts", action="store_true", help="keep test-artifacts/<run-id> of a green run"
    )
    group.addoption("--bench-nodes", type=int, default=2000, help="bench: number of kwok nodes")
    group.addoption(
        "--bench-duration", type=float, default=60.0, help="bench: seconds per measurement"
    )
    group.addoption(
        "--bench-repeat", type=int, default=3, help="bench: repetitions (the median is reported)"
    )


def pytest_configure(config: pytest.Config) -> None:
    # Never touch a developer's real cluster: nothing in this process may find it.
    os.environ.pop("KUBECONFIG", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the tier marker from the directory and the tier's timeout unless the test set one."""
    for item in items:
        try:
            parts = Path(item.path).resolve().relative_to(TESTS_DIR).parts
        except ValueError:
            continue
        tier = tiers.tier_of(parts)
        if tier is None:
            continue
        item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("timeout") is None:
            markers = [m.name for m in item.iter_markers()]
            timeout = tiers.default_timeout(tier, markers)
            item.add_marker(pytest.mark.timeout(timeout))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI=true or --require-all-tiers, a skipped netns or realnode test is an error."""
    rep = yield
    strict = tiers.strict_tiers(
        bool(item.config.getoption("--require-all-tiers")), os.environ.get("CI")
    )
    tier = next((t for t in STRICT_TIERS if item.get_closest_marker(t) is not None), None)
    if rep.skipped and strict and tier is not None:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (
            f"{tier}-tier test could not run: {reason}\n"
            "Under CI=true or --require-all-tiers this is an error, not a skip: "
            + STRICT_TIERS[tier]
        )
    return rep
