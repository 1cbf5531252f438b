"""Names, labels and tiers of the test harness."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from tests.support import names, tiers

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def test_unique_name_has_the_documented_shape() -> None:
    assert names.unique_name("test_Agent writes [v4-v6]", "a1b2c3") == (
        "t-test-agent-writes-v4-v6-a1b2c3"
    )


@given(st.text(max_size=300), st.from_regex(r"[0-9a-f]{6}", fullmatch=True))
def test_unique_name_is_always_a_dns1123_label(test_name: str, hex6: str) -> None:
    name = names.unique_name(test_name, hex6)
    assert len(name) <= 63
    assert DNS1123_LABEL.match(name), name


@given(st.text(max_size=300))
def test_test_id_is_always_a_label_value(nodeid: str) -> None:
    value = names.test_id(nodeid)
    assert len(value) <= 63
    assert LABEL_VALUE.match(value), value


def test_test_id_is_stable_and_distinguishes_parametrisations() -> None:
    a = names.test_id("tests/integration/test_x.py::test_y[a]")
    assert a == names.test_id("tests/integration/test_x.py::test_y[a]")
    assert a != names.test_id("tests/integration/test_x.py::test_y[b]")


def test_run_id_is_a_label_value_with_time_and_pid() -> None:
    run_id = names.new_run_id(datetime(2026, 11, 21, 22, 5, 9, tzinfo=UTC), 4242)
    assert run_id == "20261121-220509-4242"
    assert names.test_labels(run_id, "t::x")[names.RUN_LABEL] == run_id


def test_tier_comes_from_the_first_directory_under_tests() -> None:
    assert tiers.tier_of(("unit", "agent", "test_plan.py")) == "unit"
    assert tiers.tier_of(("integration", "test_control_plane.py")) == "integration"
    assert tiers.tier_of(("conftest.py",)) is None
    assert tiers.tier_of(("support", "test_x.py")) is None


def test_kcm_and_kwok_raise_the_integration_timeout_only() -> None:
    assert tiers.default_timeout("integration", ["integration"]) == 60
    assert tiers.default_timeout("integration", ["kwok"]) == 120
    assert tiers.default_timeout("unit", ["kcm"]) == 30  # a hang guard on a loaded runner
    assert tiers.default_timeout("bench", []) == 900


def test_needed_components_follow_tier_markers_and_fixtures() -> None:
    assert tiers.needed_components("unit", ["unit"], ["tmp_path"]) == set()
    assert tiers.needed_components("integration", ["kwok"], []) == {
        "etcd",
        "kube-apiserver",
        "kwok",
    }
    assert "kube-controller-manager" in tiers.needed_components("integration", [], ["kcm"])
    assert tiers.needed_components("unit", [], ["helm_binary"]) == {"helm"}
    assert tiers.needed_components("unit", [], ["cosign_binary"]) == {"cosign"}
    assert tiers.needed_components("unit", [], ["actionlint_binary"]) == {"actionlint"}


def test_the_realnode_tier_needs_the_node_binaries_helm_kubectl_and_kube_proxy() -> None:
    assert tiers.tier_of(("realnode", "test_e01_node_init.py")) == "realnode"
    assert tiers.needed_components("realnode", ["realnode"], []) == {
        "etcd", "kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler", "helm",
        "kubectl", "kube-proxy",
    }  # fmt: skip
    assert tiers.default_timeout("realnode", ["realnode"]) == 300
    # a bench test on a real node marks itself `kubelet` (`realnode` would put it in make test)
    assert tiers.needed_components("bench", ["bench", "compare", "kubelet"], []) == {
        "etcd", "kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler", "helm",
        "kubectl", "kube-proxy",
    }  # fmt: skip


def test_ci_true_or_the_option_makes_tiers_strict() -> None:
    assert tiers.strict_tiers(False, "true")
    assert tiers.strict_tiers(True, None)
    assert not tiers.strict_tiers(False, None)
    assert not tiers.strict_tiers(False, "false")
