"""The leader-election flags every leader-elected binary shares (kube-controller-manager's
names) and the originals' spellings kept as aliases with their original meaning:
node-lifecycle-controller's --leader-elect-id is the Lease name and --namespace its namespace;
node-ipam-controller's --leader-elect-id is the holder identity, --enable-leader-election and
--leader-elect-namespace the switch and the Lease namespace."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from local_ccm import flags
from local_ccm.cli import ipam as ipam_main
from local_ccm.cli import lifecycle as lifecycle_main
from local_ccm.flags import Flag, FlagSet, Problem
from local_ccm.ipam import options as ipam
from local_ccm.ipam.options import FLAGS as IPAM_FLAGS
from local_ccm.lease.election import choose_identity
from local_ccm.lifecycle import options as lifecycle
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from tests.support.kubeconfigs import credentials_env
from tests.support.options import load_ipam, load_lifecycle

CANONICAL = (
    "leader-elect", "leader-elect-lease-duration", "leader-elect-renew-deadline",
    "leader-elect-retry-period", "leader-elect-resource-lock", "leader-elect-resource-name",
    "leader-elect-resource-namespace", "leader-elect-identity",
)  # fmt: skip
IPAM_ENV = {"POD_NAMESPACE": "kube-system"}


def nlc(*argv: str) -> lifecycle.LifecycleOptions:
    loaded = load_lifecycle(list(argv), {})
    assert isinstance(loaded, lifecycle.LifecycleOptions), loaded
    return loaded


def nlc_problems(*argv: str) -> list[str]:
    loaded = load_lifecycle(list(argv), {})
    assert isinstance(loaded, list), loaded
    return [str(p) for p in loaded]


def ipm(*argv: str) -> ipam.IpamOptions:
    loaded = load_ipam(list(argv), IPAM_ENV)
    assert isinstance(loaded, ipam.IpamOptions), loaded
    return loaded


def ipm_problems(*argv: str) -> list[str]:
    loaded = load_ipam(list(argv), IPAM_ENV)
    assert isinstance(loaded, list), loaded
    return [str(p) for p in loaded]


@pytest.mark.parametrize("flagset", [LIFECYCLE_FLAGS, IPAM_FLAGS], ids=["nlc", "ipam"])
def test_every_leader_elected_binary_has_the_canonical_flags(flagset: FlagSet) -> None:
    for name in CANONICAL:
        flag = flagset.lookup(name)
        assert flag is not None, name
        assert flag.name == name, f"{name} is only an alias of {flag.name}"


# ---------------------------------------------------------------- node-lifecycle-controller
def test_lifecycle_leader_elect_id_is_the_lease_name_as_in_the_original() -> None:
    assert nlc("--leader-elect-id=nlc-a").election.lease_name == "nlc-a"
    assert nlc("--leader-elect-resource-name=nlc-a").election.lease_name == "nlc-a"
    assert nlc("--leader-elect-id=nlc-a", "--leader-elect-resource-name=nlc-a").election == (
        nlc("--leader-elect-resource-name=nlc-a").election
    )


def test_lifecycle_namespace_is_the_lease_namespace_as_in_the_original() -> None:
    assert nlc("--namespace=ops").election.namespace == "ops"
    assert nlc("--leader-elect-resource-namespace=ops").election.namespace == "ops"
    assert nlc("--namespace=ops", "--leader-elect-resource-namespace=ops").election.namespace == (
        "ops"
    )


def test_lifecycle_identity_lock_and_defaults() -> None:
    default = nlc().election
    assert (default.lease_name, default.namespace, default.identity) == (
        "node-lifecycle-controller", "kube-system", "",
    )  # fmt: skip
    assert nlc("--leader-elect-identity=replica-1").election.identity == "replica-1"
    assert nlc("--leader-elect-resource-lock=leases").election.enabled
    assert nlc_problems("--leader-elect-resource-lock=configmaps") == [
        'invalid flag --leader-elect-resource-lock: "configmaps": only leases'
    ]


def test_lifecycle_durations_are_ordered_only_with_leader_election() -> None:
    """kube-controller-manager validates the durations only with --leader-elect, and the
    originals use them only then."""
    argv = ("--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=30s")
    assert not nlc("--leader-elect=false", *argv).election.enabled
    assert nlc_problems(*argv) == [
        "invalid flag --leader-elect-lease-duration: must be greater than "
        "--leader-elect-renew-deadline (20s), got 15s",
        "invalid flag --leader-elect-renew-deadline: must be greater than 1.2 × "
        "--leader-elect-retry-period (30s), got 20s",
    ]


def test_every_duration_problem_is_listed_at_once() -> None:
    """A duration refused for itself does not hide the order of the other two."""
    assert nlc_problems("--leader-elect-lease-duration=5s", "--leader-elect-retry-period=0s") == [
        "invalid flag --leader-elect-retry-period: must be > 0, got 0s",
        "invalid flag --leader-elect-lease-duration: must be greater than "
        "--leader-elect-renew-deadline (10s), got 5s",
    ]


def test_lifecycle_alias_and_canonical_with_different_values_is_one_line() -> None:
    assert nlc_problems("--leader-elect-id=a", "--leader-elect-resource-name=b") == [
        "invalid flag --leader-elect-resource-name: given with different values: "
        '--leader-elect-id="a", --leader-elect-resource-name="b" (aliases of one flag; give one)'
    ]
    (line,) = nlc_problems("--leader-elect-resource-namespace=b", "--namespace=a")
    assert '--namespace="a"' in line
    assert '--leader-elect-resource-namespace="b"' in line


def test_lifecycle_a_bad_value_is_reported_under_the_spelling_given() -> None:
    (line,) = nlc_problems("--leader-elect-id=Not_A_Name")
    assert line.startswith("invalid flag --leader-elect-id: ")


def test_lifecycle_main_exits_2_on_a_conflict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--namespace=a", "--leader-elect-resource-namespace=b"]
    assert lifecycle_main.main(argv, credentials_env(tmp_path)) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2  # the problem and where to find help
    assert "--namespace" in err[0]
    assert "Traceback" not in "".join(err)


# ---------------------------------------------------------------- node-ipam-controller
def test_ipam_aliases_keep_upstreams_meanings() -> None:
    assert not ipm("--enable-leader-election=false").election.enabled
    assert not ipm("--leader-elect=false").election.enabled
    assert ipm("--leader-elect-id=replica-a").election.identity == "replica-a"
    assert ipm("--leader-elect-identity=replica-a").election.identity == "replica-a"
    assert ipm("--leader-elect-namespace=ops").election.namespace == "ops"
    assert ipm("--leader-elect-resource-namespace=ops").election.namespace == "ops"
    assert ipm("--leader-elect-resource-name=lease").election.lease_name == "lease"
    same = ipm("--enable-leader-election=false", "--leader-elect=0")
    assert not same.election.enabled  # the same value, spelled differently: fine


def test_ipam_alias_and_canonical_with_different_values_is_one_line_each() -> None:
    lines = ipm_problems("--enable-leader-election=false", "--leader-elect=true",
                         "--leader-elect-id=a", "--leader-elect-identity=b")  # fmt: skip
    assert lines == [
        "invalid flag --leader-elect: given with different values: "
        '--enable-leader-election="false", --leader-elect="true" (aliases of one flag; '
        "give one)",
        "invalid flag --leader-elect-identity: given with different values: "
        '--leader-elect-id="a", --leader-elect-identity="b" (aliases of one flag; give one)',
    ]


def test_ipam_missing_namespace_names_both_spellings() -> None:
    loaded = load_ipam([], {})
    assert isinstance(loaded, list)
    (line,) = [str(p) for p in loaded]
    assert "--leader-elect-resource-namespace" in line
    assert "--leader-elect-namespace" in line


def test_ipam_main_exits_2_on_a_conflict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--leader-elect-namespace=a", "--leader-elect-resource-namespace=b"]
    assert ipam_main.main(argv, credentials_env(tmp_path)) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert "--leader-elect-namespace" in err[0]


# ---------------------------------------------------------------- --help and the parser
@pytest.mark.parametrize(
    ("flagset", "entry", "alias"),
    [
        (LIFECYCLE_FLAGS, "-leader-elect-resource-name name", "[alias: -leader-elect-id]"),
        (LIFECYCLE_FLAGS, "-leader-elect-resource-namespace namespace", "[alias: -namespace]"),
        (IPAM_FLAGS, "-leader-elect\n", "[alias: -enable-leader-election]"),
        (IPAM_FLAGS, "-leader-elect-identity id", "[alias: -leader-elect-id]"),
        (IPAM_FLAGS, "-leader-elect-resource-namespace namespace",
         "[alias: -leader-elect-namespace]"),
    ],
)  # fmt: skip
def test_help_lists_the_aliases_under_their_canonical_flag(
    flagset: FlagSet, entry: str, alias: str
) -> None:
    usage = flags.format_usage(flagset)
    start = usage.index("  " + entry)
    assert alias in usage[start : usage.index("\n  -", start + 3)]


SET = FlagSet("t", [Flag("count", "int", 1, "Count.", aliases=("n",))])


def test_the_same_spelling_twice_is_last_wins_as_in_go() -> None:
    parsed = flags.parse(SET, ["--count=2", "--count=3"], {})
    assert (parsed.problems, parsed.values["count"]) == ((), 3)


def test_spellings_that_agree_after_conversion_are_not_a_conflict() -> None:
    parsed = flags.parse(SET, ["--count=0x10", "-n=16"], {})
    assert (parsed.problems, parsed.values["count"], parsed.given_as("count")) == ((), 16, "n")


def test_an_invalid_value_is_blamed_on_the_spelling_given() -> None:
    parsed = flags.parse(SET, ["-n=x"], {})
    assert [p.flag for p in parsed.problems] == ["n"]
    assert all(isinstance(p, Problem) for p in parsed.problems)


def test_identity_is_given_or_pod_name_or_hostname_with_a_suffix() -> None:
    rng = random.Random(1)
    assert choose_identity("given", "pod", "host", rng) == "given"
    assert choose_identity("", "Pod-1", "host", rng).startswith("pod-1_")
    assert choose_identity("", "", "Host", rng).startswith("host_")
