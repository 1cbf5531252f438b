"""`local-ccm-controller-manager`: `--controllers` as kube-controller-manager reads it, one flag
table uniting the controllers' (a flag both define once), its own Lease default."""

from __future__ import annotations

import pytest

from local_ccm import flags
from local_ccm.cli import manager
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
        "node-lifecycle", "node-ipam", "kubelet-serving-approver", "service-lb-ipam"
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
    assert {f.name for f in lifecycle.flags} | {f.name for f in ipam.flags} < set(names)
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


def test_a_bad_controllers_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert manager.main(["--controllers=node-dns"], {}) == 2
    assert "unknown controller 'node-dns'" in capsys.readouterr().err
