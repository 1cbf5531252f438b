"""The pure build decisions of the control-plane harness."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import gobuild

UPSTREAM: dict[str, Any] = {
    "Module": {"Path": "k8s.io/kubernetes"},
    "Go": "1.26.0",
    "GoDebug": [{"Key": "default", "Value": "go1.26"}],
    "Require": [
        {"Path": "github.com/spf13/cobra", "Version": "v1.9.1"},
        {"Path": "k8s.io/api", "Version": "v0.0.0"},
        {"Path": "k8s.io/client-go", "Version": "v0.0.0"},
        {"Path": "k8s.io/klog/v2", "Version": "v2.130.1"},
        {"Path": "k8s.io/new-in-1-37", "Version": "v0.0.0", "Indirect": True},
    ],
    "Replace": [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
        {"Old": {"Path": "k8s.io/client-go"}, "New": {"Path": "./staging/src/k8s.io/client-go"}},
        {
            "Old": {"Path": "github.com/example/broken", "Version": "v1.0.0"},
            "New": {"Path": "github.com/example/fixed", "Version": "v1.0.1"},
        },
    ],
    "Exclude": [{"Path": "github.com/example/bad", "Version": "v0.1.0"}],
}


def test_staging_version_maps_v1_minor_patch_to_v0() -> None:
    assert gobuild.staging_version("v1.37.1") == "v0.37.1"
    assert gobuild.staging_version("v1.38.0-rc.1") == "v0.38.0-rc.1"


def test_staging_version_rejects_non_v1() -> None:
    with pytest.raises(ValueError, match=r"v1\.x"):
        gobuild.staging_version("v2.0.0")


def test_replace_list_is_derived_from_every_v000_k8s_requirement() -> None:
    edits = gobuild.derive_module_edits(UPSTREAM, "v1.37.1")
    staging = [(o, n) for o, n in edits.replaces if o.startswith("k8s.io/")]
    assert staging == [
        ("k8s.io/api", "k8s.io/api@v0.37.1"),
        ("k8s.io/client-go", "k8s.io/client-go@v0.37.1"),
        ("k8s.io/new-in-1-37", "k8s.io/new-in-1-37@v0.37.1"),
    ]


def test_real_upstream_replaces_and_excludes_are_copied_directory_ones_dropped() -> None:
    edits = gobuild.derive_module_edits(UPSTREAM, "v1.37.1")
    assert ("github.com/example/broken@v1.0.0", "github.com/example/fixed@v1.0.1") in edits.replaces
    assert not any("staging" in new for _, new in edits.replaces)
    assert edits.excludes == ("github.com/example/bad@v0.1.0",)


def test_go_and_godebug_lines_are_copied_verbatim() -> None:
    edits = gobuild.derive_module_edits(UPSTREAM, "v1.37.1")
    assert (edits.go, edits.godebug) == ("1.26.0", ("default=go1.26",))
    assert edits.edit_args()[-2:] == ["-go=1.26.0", "-godebug=default=go1.26"]


def test_replaces_in_reads_back_the_same_form_as_derived() -> None:
    module = {
        "Replace": [
            {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "k8s.io/api", "Version": "v0.37.1"}}
        ]
    }
    assert gobuild.replaces_in(module) == (("k8s.io/api", "k8s.io/api@v0.37.1"),)


def test_kube_ldflags_stamp_both_version_packages() -> None:
    flags = gobuild.kube_ldflags("v1.37.1", "abc123", "2026-11-21T00:00:00Z")
    for pkg in gobuild.VERSION_STAMPED_PACKAGES:
        assert f"-X {pkg}.gitVersion=v1.37.1" in flags
        assert f"-X {pkg}.gitMinor=37" in flags
        assert f"-X {pkg}.gitCommit=abc123" in flags
        assert f"-X {pkg}.buildDate=2026-11-21T00:00:00Z" in flags
    assert flags.startswith("-s -w ")


def test_kube_ldflags_without_date_or_commit_leave_those_keys_out() -> None:
    flags = gobuild.kube_ldflags("v1.37.1", None, None)
    assert "buildDate" not in flags
    assert "gitCommit" not in flags


def test_cache_key_ignores_order_and_changes_with_any_input() -> None:
    a = gobuild.cache_key({"go": "go1.26.8", "version": "v1.37.1"})
    assert a == gobuild.cache_key({"version": "v1.37.1", "go": "go1.26.8"})
    assert a != gobuild.cache_key({"version": "v1.37.1", "go": "go1.26.9"})
    assert len(a) == 12


def test_entry_name_shows_component_version_and_go() -> None:
    name = gobuild.entry_name("etcd", "v3.6.16", "go1.26.8", "0123456789ab")
    assert name == "etcd-v3.6.16-go1.26.8-0123456789ab"


@pytest.mark.parametrize(
    ("binary", "pin", "output"),
    [
        ("kube-apiserver", "v1.37.1", "Kubernetes v1.37.1\n"),
        ("etcd", "v3.6.16", "etcd Version: 3.6.16\nGit SHA: x\n"),
        ("kwok", "v0.8.0", "kwok version v0.8.0 go1.26.8 (linux/amd64)\n"),
        ("helm", "v4.3.1", 'version.BuildInfo{Version:"v4.3.1", GitCommit:""}\n'),
    ],
)
def test_version_problem_accepts_the_pinned_version(binary: str, pin: str, output: str) -> None:
    assert gobuild.version_problem(binary, pin, output) is None


def test_version_problem_reports_an_unstamped_binary() -> None:
    problem = gobuild.version_problem("kube-apiserver", "v1.37.1", "Kubernetes v0.0.0-master\n")
    assert problem is not None
    assert "Kubernetes v1.37.1" in problem


def test_parse_pins_reports_every_problem_at_once() -> None:
    with pytest.raises(ValueError, match="etcd: missing") as info:
        gobuild.parse_pins({"kubernetes": "v1.37.0-rc.1", "kwok": "v0.8.0", "helm": "v4.3.1"})
    assert "kubernetes: 'v1.37.0-rc.1' is not a release version" in str(info.value)


PINS = {
    "kubernetes": "v1.37.1",
    "kubernetes_policy_minimum": "v1.30.14",
    "etcd": "v3.6.16",
    "kwok": "v0.8.0",
    "helm": "v4.3.1",
    "cosign": "v3.1.3",
    "actionlint": "v1.7.12",
    "prometheus": "v0.316.0",
}


def test_parse_pins_reads_the_policy_minimum_apiserver_pin() -> None:
    pins = gobuild.parse_pins(PINS)
    assert (pins.kubernetes, pins.kubernetes_policy_minimum) == ("v1.37.1", "v1.30.14")


def test_parse_pins_requires_the_policy_minimum_pin() -> None:
    data = {k: v for k, v in PINS.items() if k != "kubernetes_policy_minimum"}
    with pytest.raises(ValueError, match="kubernetes_policy_minimum: missing"):
        gobuild.parse_pins(data)


@pytest.mark.parametrize("minimum", ["v1.37.0", "v1.38.0", "v2.30.0"])
def test_parse_pins_refuses_a_policy_minimum_not_older_than_the_newest(minimum: str) -> None:
    with pytest.raises(ValueError, match=r"is not an older v1 minor than v1\.37\.1"):
        gobuild.parse_pins({**PINS, "kubernetes_policy_minimum": minimum})


def test_missing_from_help_matches_whole_names_only() -> None:
    help_text = "      --secure-port int\n  plugins: NodeRestriction, ValidatingAdmissionPolicy.\n"
    missing = gobuild.missing_from_help(
        help_text, ["secure-port", "secure"], ["NodeRestriction", "Node"]
    )
    assert missing == ["--secure", "Node"]
