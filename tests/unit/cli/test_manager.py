"""`local-ccm-controller-manager`: `--controllers` as kube-controller-manager reads it, one flag
table uniting the controllers' (a flag both define once), its own Lease default."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ccm import flags
from local_ccm.cli import central, manager
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS

KNOWN = {"node-lifecycle": True, "node-ipam": True, "later": False}


@pytest.mark.parametrize(
    ("spec", "chosen"),
    [
        ("*", ("node-lifecycle", "node-ipam")),
        ("*,-node-lifecycle", ("node-ipam",)),
        ("node-ipam", ("node-ipam",)),
        ("*,later", ("node-lifecycle", "node-ipam", "later")),
        ("later,node-lifecycle", ("node-lifecycle", "later")),
        (" node-ipam , ", ("node-ipam",)),
        # the first item naming a controller decides, wherever `*` is
        ("node-ipam,-node-ipam", ("node-ipam",)),
        ("-node-ipam,node-ipam,*", ("node-lifecycle",)),
        ("-node-ipam,*", ("node-lifecycle",)),
    ],
)
def test_controllers_select_like_kube_controller_manager(
    spec: str, chosen: tuple[str, ...]
) -> None:
    assert manager.select(spec, KNOWN) == chosen


def test_an_unknown_or_empty_selection_is_refused() -> None:
    assert manager.select("*,bogus", KNOWN) == [
        "unknown controller 'bogus'; known: node-lifecycle, node-ipam, later"
    ]
    assert manager.select("-node-ipam,-node-lifecycle", KNOWN) == ["no controller selected"]
    assert manager.select("", KNOWN) == ["no controller selected"]


def test_a_new_controller_is_one_table_entry() -> None:
    assert list(manager.CONTROLLERS) == [
        "node-lifecycle", "node-ipam", "kubelet-serving-approver", "service-lb-ipam", "node-bmc"
    ]  # fmt: skip


def test_the_allocator_is_off_unless_named() -> None:
    defaults = {name: make().default_on for name, make in manager.CONTROLLERS.items()}
    assert "service-lb-ipam" not in manager.select("*", defaults)
    assert manager.select("*,service-lb-ipam", defaults)[-1] == "service-lb-ipam"
    assert manager.manager_flags().lookup("lb-class") is not None


def test_the_approver_is_off_unless_named() -> None:
    defaults = {name: make().default_on for name, make in manager.CONTROLLERS.items()}
    assert manager.select("*", defaults) == ("node-lifecycle", "node-ipam")
    assert manager.select("*,kubelet-serving-approver", defaults)[-1] == "kubelet-serving-approver"
    assert manager.manager_flags().lookup("csr-deny") is not None


def test_the_manager_has_every_flag_of_both_once_and_its_own_lease() -> None:
    table = manager.manager_flags()
    lifecycle, ipam = (manager.CONTROLLERS[n]().flags() for n in ("node-lifecycle", "node-ipam"))
    names = [flag.name for flag in table.flags]
    assert len(names) == len(set(names))
    # Every spelling of both is accepted; IPAM's web-server flags as aliases of the one health
    # flag (below).
    for flag in (*lifecycle.flags, *ipam.flags):
        assert table.lookup(flag.name) is not None, flag.name
    assert {f.name for f in lifecycle.flags} | {f.name for f in ipam.flags} - set(
        manager.IPAM_WEB_FLAGS
    ) < set(names)
    for name in (
        "leader-elect",
        "leader-elect-lease-duration",
        "leader-elect-renew-deadline",
        "leader-elect-retry-period",
        "leader-elect-resource-name",
        "leader-elect-resource-namespace",
        "leader-elect-identity",
        "controllers",
    ):
        assert table.lookup(name) is not None, name  # fmt: skip
    parsed = flags.parse(table, [], {})
    assert parsed.get_str("leader-elect-resource-name") == manager.PROG
    assert parsed.get_str("controllers") == "*"


def test_every_spelling_of_the_lifecycle_table_is_kept() -> None:
    table = manager.manager_flags()
    for flag in LIFECYCLE_FLAGS.flags:
        for spelling in (flag.name, *flag.aliases):
            assert table.lookup(spelling) is not None, spelling
    assert table.lookup("leader-elect-id") is not None  # the lifecycle original's Lease name


def test_help_lists_the_controllers(capsys: pytest.CaptureFixture[str]) -> None:
    assert manager.main(["--help"], {}) == 0
    out = capsys.readouterr().out
    for text in (
        "-controllers",
        "node-lifecycle, node-ipam",
        "-not-ready-timeout",
        "-cluster-cidr",
    ):
        assert text in out


def test_repeated_controllers_flags_add_up_like_kube_controller_manager() -> None:
    """pflag's string slice: the lists of every `--controllers` count, not the last one alone
    (a manifest with one list item per controller ran only the last controller)."""
    defaults = {name: make().default_on for name, make in manager.CONTROLLERS.items()}
    argv = ["--controllers=node-lifecycle", "--controllers", "service-lb-ipam,node-bmc"]
    parsed = flags.parse(manager.manager_flags(), argv, {})
    assert manager.select(parsed.get_str("controllers"), defaults) == (
        "node-lifecycle", "service-lb-ipam", "node-bmc"
    )  # fmt: skip


def test_a_bad_controllers_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert manager.main(["--controllers=node-dns"], {}) == 2
    assert "unknown controller 'node-dns'" in capsys.readouterr().err


def test_the_start_up_line_names_only_the_servers_the_process_runs(tmp_path: Path) -> None:
    """The manager serves health and metrics as its first controller's options say; IPAM's
    web server (:8081) is not started, so its address is not on the line."""
    known: list[central.Row] = [make() for make in manager.CONTROLLERS.values()]
    env = {"HOME": str(tmp_path)}
    fixed = central.fix_env(env, known)
    parsed = flags.parse(manager.manager_flags(), ["--metrics-bind-address=:9100"], fixed[0])
    loaded = central.load(parsed, fixed, known, ("node-lifecycle", "node-ipam"))
    assert isinstance(loaded, tuple)
    fields = central.start_fields(loaded)
    assert "web" not in fields
    assert fields["metrics"] == ":9100"
    assert fields["metrics_secure"] == "true"  # the lifecycle options' HTTPS /metrics
    assert fields["health"] == ":8091"
    assert fields["cluster_cidr"] == "-"  # IPAM's settings stay


def _ipam_alone(tmp_path: Path, *argv: str) -> central.Bound:
    known: list[central.Row] = [make() for make in manager.CONTROLLERS.values()]
    fixed = central.fix_env({"HOME": str(tmp_path)}, known)
    parsed = flags.parse(manager.manager_flags(), ["--controllers=node-ipam", *argv], fixed[0])
    loaded = central.load(parsed, fixed, known, ("node-ipam",))
    assert isinstance(loaded, tuple), loaded
    (ipam,) = loaded
    return ipam


def test_ipam_alone_serves_health_on_the_process_s_one_flag(tmp_path: Path) -> None:
    """One health-flag family whichever controllers run: IPAM alone in the manager answers
    /healthz on --health-probe-bind-address (:8091), not node-ipam-controller's :8081."""
    ipam = _ipam_alone(tmp_path)
    serving = ipam.shared().serving
    assert (serving.health_address, serving.health_flag) == (":8091", "health-probe-bind-address")
    assert (serving.metrics_address, serving.metrics_flag) == (":8090", "metrics-bind-address")
    assert central.start_fields((ipam,))["web"] == ":8091"


@pytest.mark.parametrize("alias", manager.IPAM_WEB_FLAGS)
def test_node_ipam_controller_s_web_flags_are_deprecated_aliases_in_the_manager(
    tmp_path: Path, alias: str
) -> None:
    ipam = _ipam_alone(tmp_path, f"--{alias}=127.0.0.1:9181")
    assert ipam.shared().serving.health_address == "127.0.0.1:9181"
    deprecated = f"--{alias} is deprecated in this binary: use --health-probe-bind-address"
    assert deprecated in ipam.shared().warnings
    # Given twice with different values, as any alias: refused, naming both spellings.
    argv = [f"--{alias}=:9181", "--health-probe-bind-address=:9182"]
    parsed = flags.parse(manager.manager_flags(), argv, {})
    assert any("aliases of one flag" in str(p) for p in parsed.problems), parsed.problems


def test_help_lists_the_process_flags_then_each_controller_s_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert manager.main(["--help"], {}) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.endswith(":") and line[0].isalpha()]
    assert titles == [manager.GENERAL + ":", "node-lifecycle flags:", "node-ipam flags:",
                      "kubelet-serving-approver flags:", "service-lb-ipam flags:",
                      "node-bmc flags:", "Other flags:"]  # fmt: skip
    sections = {title.removesuffix(":"): section for title, section in _sections(out)}
    general = sections[manager.GENERAL]
    for name in (
        "controllers",
        "kubeconfig",
        "apiserver",
        "health-probe-bind-address",
        "metrics-bind-address",
        "metrics-secure",
        "leader-elect",
        "v",
        "log-format",
    ):
        assert name in general, name  # fmt: skip
    assert {"not-ready-timeout", "probe", "icmp-mode"} <= set(sections["node-lifecycle flags"])
    assert {"cluster-cidr", "node-cidr-mask-size-ipv4"} <= set(sections["node-ipam flags"])
    assert set(sections["kubelet-serving-approver flags"]) == {
        "csr-deny", "csr-ip-prefixes", "csr-max-expiration"}  # fmt: skip
    assert {"lb-class", "lb-kubevip-configmap"} <= set(sections["service-lb-ipam flags"])
    assert set(sections["node-bmc flags"]) == {
        "bmc-poll-interval", "bmc-concurrent-polls", "bmc-credentials-namespace",
        "bmc-power-off-timeout"}  # fmt: skip
    assert {"bmc-power-state", "bmc-max-age", "bmc-fencing"} <= set(
        sections["node-lifecycle flags"])  # fmt: skip
    every = [name for _, section in _sections(out) for name in section]
    assert len(every) == len(set(every)), "a flag listed twice"
    # The one health family: IPAM's web-server flags are no entries, only marked aliases.
    assert "webserver-bind-address" not in every
    assert "health-probe-address" not in every
    assert "[alias: -webserver-bind-address, -health-probe-address]" in out


def _sections(usage: str) -> list[tuple[str, list[str]]]:
    """(title, flag names) of each section of `usage`."""
    found: list[tuple[str, list[str]]] = []
    for line in usage.splitlines():
        if line.endswith(":") and line[0].isalpha():
            found.append((line.removesuffix(":"), []))
        elif line.startswith("  -") and found:
            found[-1][1].append(line.split()[0].lstrip("-").rstrip(","))
    return found


def test_the_single_controller_binaries_keep_one_flat_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from local_ccm.cli import ipam  # noqa: PLC0415

    assert ipam.main(["--help"], {}) == 0
    out = capsys.readouterr().out
    assert [t for t, _ in _sections(out)] == ["Flags"]
    names = _sections(out)[0][1]
    assert {"webserver-bind-address", "health-probe-address"} <= set(names)  # upstream's


def test_the_standalone_leases_default_to_the_standalone_binaries_own() -> None:
    table = manager.manager_flags()
    assert manager.standalone_leases(flags.parse(table, [], {})) == {
        "node-lifecycle": "node-lifecycle-controller",
        "node-ipam": "node-ipam-controller",
    }
    given = ["--node-ipam-standalone-lease=ipam-old", "--node-lifecycle-standalone-lease="]
    # empty: that controller starts at once
    assert manager.standalone_leases(flags.parse(table, given, {})) == {"node-ipam": "ipam-old"}


def test_a_standalone_lease_that_is_no_lease_name_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--node-ipam-standalone-lease=Old_IPAM", "--node-lifecycle-standalone-lease=-x"]
    assert manager.main(argv, {}) == 2
    err = capsys.readouterr().err
    assert 'node-ipam-standalone-lease: "Old_IPAM"' in err
    assert "node-lifecycle-standalone-lease" in err  # every problem listed


def test_help_lists_the_standalone_leases_with_the_process_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert manager.main(["--help"], {}) == 0
    sections = dict(_sections(capsys.readouterr().out))
    assert {"node-ipam-standalone-lease", "node-lifecycle-standalone-lease"} <= set(
        sections[manager.GENERAL])  # fmt: skip


def test_the_single_binaries_wait_for_the_manager_s_lease_only_when_told() -> None:
    from local_ccm.cli import ipam, lifecycle  # noqa: PLC0415
    from local_ccm.lease.options import waited_leases  # noqa: PLC0415

    lease = "local-ccm-controller-manager"
    for row in (ipam.controller(), lifecycle.controller()):
        table, waits = central.single_flags(row), {row.name: central.MANAGER_LEASE}
        assert waited_leases(flags.parse(table, [], {}), waits) == {}  # drop-in: no wait
        given = flags.parse(table, [f"--controller-manager-lease={lease}"], {})
        assert waited_leases(given, waits) == {row.name: lease}
    # The manager waits for the standalone Leases instead; it has no such flag.
    assert manager.manager_flags().lookup("controller-manager-lease") is None
