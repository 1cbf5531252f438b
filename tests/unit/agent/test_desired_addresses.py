"""desired_addresses(): classification, the rules, the ordering, and worked examples."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from local_ccm.agent.core.addresses import (
    AddressPolicy,
    NodeAddress,
    desired_addresses,
    resolve_family_order,
)
from local_ccm.agent.core.candidates import (
    Detection,
    DetectorKey,
)
from local_ccm.agent.core.config import Family
from tests.unit.agent.builders import addrs, detections, found, no_route

PREFER = AddressPolicy()


def _run(
    current: str,
    detected: dict[DetectorKey, Detection],
    *,
    owned: str | None = None,
    provided: str = "",
    policy: AddressPolicy = PREFER,
) -> tuple[tuple[NodeAddress, ...], tuple[NodeAddress, ...], list[str]]:
    plan = desired_addresses(
        addrs(current),
        tuple(ip_address(p) for p in provided.split(",") if p),
        detected,
        None if owned is None else addrs(owned),
        policy,
    )
    return plan.addresses, plan.owned, [f.kind for f in plan.findings]


# ------------------------------------------------------------------ worked examples, one by one
def test_example_1_empty_node_gets_internal_then_external() -> None:
    out, owned, _ = _run("", detections(int4=found("192.0.2.10"), ext4=found("203.0.113.10")))
    assert out == addrs("Int 192.0.2.10, Ext 203.0.113.10")
    assert owned == out


def test_example_2_a06_dual_stack_kubelet_addresses_survive_external_goes_after() -> None:
    out, owned, _ = _run(
        "Int 192.0.2.10, Int 2001:db8::10, Hostname n1",
        detections(ext4=found("203.0.113.10")),
        provided="192.0.2.10,2001:db8::10",
    )
    assert out == addrs("Int 192.0.2.10, Int 2001:db8::10, Ext 203.0.113.10, Hostname n1")
    assert owned == addrs("Ext 203.0.113.10")


def test_example_3_external_equal_to_internal_is_deduped_and_annotation_is_empty() -> None:
    out, owned, findings = _run(
        "Int 192.0.2.10, Hostname n1", detections(ext4=found("192.0.2.10")), provided="192.0.2.10"
    )
    assert out == addrs("Int 192.0.2.10, Hostname n1")
    assert owned == ()
    assert findings == ["dedupe_applied"]


def test_example_4_originals_random_order_is_adopted_and_reordered() -> None:
    out, owned, _ = _run(
        "Ext 203.0.113.10, Hostname n1, Int 192.0.2.10",
        detections(int4=found("192.0.2.10"), ext4=found("203.0.113.10")),
    )
    assert out == addrs("Int 192.0.2.10, Ext 203.0.113.10, Hostname n1")
    assert owned == addrs("Int 192.0.2.10, Ext 203.0.113.10")


def test_example_5_failed_detector_keeps_last_good() -> None:
    out, owned, findings = _run(
        "Int 192.0.2.10, Ext 203.0.113.10", detections(ext4=no_route()), owned="Ext 203.0.113.10"
    )
    assert out == addrs("Int 192.0.2.10, Ext 203.0.113.10")
    assert owned == addrs("Ext 203.0.113.10")
    assert findings == ["kept_last_good"]


def test_example_6_disabled_detector_drops_its_owned_entry() -> None:
    out, owned, _ = _run("Int 192.0.2.10, Ext 203.0.113.10", detections(), owned="Ext 203.0.113.10")
    assert out == addrs("Int 192.0.2.10")
    assert owned == ()


def test_example_7_provided_mismatch_keeps_the_kubelet_address() -> None:
    out, owned, findings = _run(
        "Int 192.0.2.5, Hostname n1", detections(int4=found("192.0.2.20")), provided="192.0.2.5"
    )
    assert out == addrs("Int 192.0.2.5, Hostname n1")
    assert owned == ()
    assert findings == ["provided_mismatch"]


def test_a_migrated_node_gets_the_kubelets_node_ip_back() -> None:
    """The Go original overwrote the kubelet's InternalIP with its detection (192.0.2.20). The
    detection contradicts --node-ip and is dropped; the kubelet's 192.0.2.10 is put back as
    the kubelet's entry (never the agent's to remove), so the Node keeps an InternalIP: the
    kubelet, with an external cloud provider, does not write its addresses again."""
    out, owned, findings = _run(
        "Hostname n1, Int 192.0.2.20, Ext 203.0.113.5",
        detections(int4=found("192.0.2.20"), ext4=found("203.0.113.5")),
        provided="192.0.2.10",
    )
    assert out == addrs("Int 192.0.2.10, Ext 203.0.113.5, Hostname n1")
    assert owned == addrs("Ext 203.0.113.5")
    assert findings == ["provided_mismatch"]


def test_a_single_ipv6_node_ip_stays_the_primary_beside_a_detected_ipv4() -> None:
    out, _, _ = _run(
        "Int 2001:db8::10, Hostname n1", detections(int4=found("192.0.2.10")),
        provided="2001:db8::10",
        policy=AddressPolicy(resolve_family_order((), [ip_address("2001:db8::10")])),
    )  # fmt: skip
    assert out == addrs("Int 2001:db8::10, Int 192.0.2.10, Hostname n1")


def test_example_8_foreign_external_stays_after_ours() -> None:
    # The example lists only Ext4; the owned InternalIP implies Int4 found that same address.
    out, owned, _ = _run(
        "Int 192.0.2.10, Ext 198.51.100.7",
        detections(int4=found("192.0.2.10"), ext4=found("203.0.113.10")),
        owned="Int 192.0.2.10",
    )
    assert out == addrs("Int 192.0.2.10, Ext 203.0.113.10, Ext 198.51.100.7")
    assert owned == addrs("Int 192.0.2.10, Ext 203.0.113.10")


# ------------------------------------------------------------------ classification
def test_adoption_only_covers_enabled_detectors_families() -> None:
    # Int4 enabled, Int6 not: the IPv6 InternalIP stays as foreign, the IPv4 one is replaced.
    out, owned, _ = _run("Int 192.0.2.99, Int 2001:db8::99", detections(int4=found("192.0.2.10")))
    assert out == addrs("Int 192.0.2.10, Int 2001:db8::99")
    assert owned == addrs("Int 192.0.2.10")


def test_once_annotation_exists_new_foreign_entries_are_not_adopted() -> None:
    out, owned, _ = _run("Int 192.0.2.99", detections(int4=found("192.0.2.10")), owned="")
    assert out == addrs("Int 192.0.2.10, Int 192.0.2.99")  # ours before foreign
    assert owned == addrs("Int 192.0.2.10")


def test_provided_entries_are_never_adopted() -> None:
    out, _, _ = _run("Int 192.0.2.5", detections(int4=found("192.0.2.5")), provided="192.0.2.5")
    assert out == addrs("Int 192.0.2.5")


def test_provided_wins_over_an_owned_listing() -> None:
    # The agent once wrote it; then the kubelet was started with --node-ip for it.
    out, owned, _ = _run(
        "Int 192.0.2.10",
        detections(int4=found("192.0.2.20")),
        owned="Int 192.0.2.10",
        provided="192.0.2.10",
    )
    assert out == addrs("Int 192.0.2.10")
    assert owned == ()


def test_policy_ignore_treats_provided_ips_as_ordinary_entries_a22() -> None:
    out, owned, findings = _run(
        "Int 192.0.2.5",
        detections(int4=found("192.0.2.10")),
        provided="192.0.2.5",
        policy=AddressPolicy(provided="ignore"),
    )
    assert out == addrs("Int 192.0.2.10")
    assert owned == out
    assert findings == []


# ------------------------------------------------------------------ rules
def test_rule1_non_ip_types_are_never_touched() -> None:
    current = "Hostname n1, InternalDNS n1.example., ExternalDNS n1.example.com., Weird x"
    out, _, _ = _run(current, detections(int4=found("192.0.2.10")))
    assert out == addrs("Int 192.0.2.10, " + current)


def test_rule2_never_collapse_by_type() -> None:
    out, _, _ = _run(
        "",
        detections(
            int4=found("192.0.2.10"),
            int6=found("2001:db8:1::10"),
            ext4=found("198.51.100.10"),
            ext6=found("2001:db8:2::10"),
        ),
    )
    assert out == addrs("Int 192.0.2.10, Int 2001:db8:1::10, Ext 198.51.100.10, Ext 2001:db8:2::10")


def test_rule3_equal_foreign_entry_satisfies_detector_without_claiming_it() -> None:
    out, owned, _ = _run("Ext 203.0.113.10", detections(ext4=found("203.0.113.10")), owned="")
    assert out == addrs("Ext 203.0.113.10")
    assert owned == ()


def test_rule3_ipv6_entries_match_by_value_not_spelling() -> None:
    out, owned, _ = _run("Ext 2001:DB8:0:0::10", detections(ext6=found("2001:db8::10")), owned="")
    assert out == addrs("Ext 2001:DB8:0:0::10")
    assert owned == ()


def test_rule4_changed_address_replaces_owned_entry_and_keeps_foreign_a14() -> None:
    out, owned, _ = _run(
        "Int 192.0.2.10, Ext 198.51.100.10, Ext 203.0.113.99, InternalDNS n1.example.",
        detections(int4=found("192.0.2.10"), ext4=found("198.51.100.20")),
        owned="Int 192.0.2.10, Ext 198.51.100.10",
    )
    assert out == addrs(
        "Int 192.0.2.10, Ext 198.51.100.20, Ext 203.0.113.99, InternalDNS n1.example."
    )
    assert owned == addrs("Int 192.0.2.10, Ext 198.51.100.20")


def test_rule5_owned_entry_removed_by_someone_else_is_not_re_added() -> None:
    out, owned, findings = _run(
        "Int 192.0.2.10", detections(ext4=no_route()), owned="Ext 203.0.113.10"
    )
    assert out == addrs("Int 192.0.2.10")
    assert owned == ()
    assert findings == []


def test_rule6_provided_ip_of_other_family_does_not_block_detection() -> None:
    out, owned, findings = _run(
        "Int 2001:db8::5",
        detections(int4=found("192.0.2.10")),
        provided="2001:db8::5",
    )
    assert out == addrs("Int 192.0.2.10, Int 2001:db8::5")
    assert owned == addrs("Int 192.0.2.10")
    assert findings == []


def test_rule6_mismatch_drops_an_owned_internal_of_that_family() -> None:
    out, owned, findings = _run(
        "Int 192.0.2.5, Int 192.0.2.10",
        detections(int4=found("192.0.2.20")),
        owned="Int 192.0.2.10",
        provided="192.0.2.5",
        policy=AddressPolicy(provided="strict"),
    )
    assert out == addrs("Int 192.0.2.5")
    assert owned == ()
    assert findings == ["provided_mismatch"]


def test_rule7_dedupe_removes_owned_external_equal_to_an_internal() -> None:
    out, owned, _ = _run(
        "Int 192.0.2.10, Ext 192.0.2.10",
        detections(ext4=found("192.0.2.10")),
        owned="Ext 192.0.2.10",
    )
    assert out == addrs("Int 192.0.2.10")
    assert owned == ()


def test_rule7_dedupe_never_removes_a_foreign_external() -> None:
    out, owned, _ = _run(
        "Int 192.0.2.10, Ext 192.0.2.10", detections(ext4=found("192.0.2.10")), owned=""
    )
    assert out == addrs("Int 192.0.2.10, Ext 192.0.2.10")
    assert owned == ()


def test_rule7_dedupe_compares_with_the_final_internal_list() -> None:
    # The owned InternalIP 192.0.2.10 is replaced, so an ExternalIP equal to it may be written.
    out, _, findings = _run(
        "Int 192.0.2.10",
        detections(int4=found("192.0.2.20"), ext4=found("192.0.2.10")),
        owned="Int 192.0.2.10",
    )
    assert out == addrs("Int 192.0.2.20, Ext 192.0.2.10")
    assert findings == []


def test_rule7_dedupe_disabled_writes_external_equal_to_internal_a04() -> None:
    out, _, _ = _run(
        "Int 192.0.2.10",
        detections(ext4=found("192.0.2.10")),
        policy=AddressPolicy(dedupe_external=False),
    )
    assert out == addrs("Int 192.0.2.10, Ext 192.0.2.10")


def test_without_dedupe_an_external_equal_to_the_provided_ip_is_written_beside_it() -> None:
    # Classified by type and address: the kubelet's --node-ip is its InternalIP entry only,
    # and upstream's node address helpers keep InternalIP x and ExternalIP x both.
    no_dedupe = AddressPolicy(dedupe_external=False)
    detected = detections(ext4=found("192.0.2.1"))
    both = "Int 192.0.2.1, Ext 192.0.2.1"
    first = _run("Int 192.0.2.1", detected, provided="192.0.2.1", policy=no_dedupe)
    assert first == (addrs(both), addrs("Ext 192.0.2.1"), [])
    # The next pass reads what was written: stable, the ExternalIP stays ours.
    again = _run(both, detected, owned="Ext 192.0.2.1", provided="192.0.2.1", policy=no_dedupe)
    assert again == first


def test_an_external_entry_with_the_provided_address_is_not_the_kubelets() -> None:
    # Written by the agent earlier, with dedupe on now: its own entry, removed like any other.
    planned = _run(
        "Int 192.0.2.1, Ext 192.0.2.1",
        detections(ext4=found("192.0.2.1")),
        owned="Ext 192.0.2.1",
        provided="192.0.2.1",
    )
    assert planned == (addrs("Int 192.0.2.1"), (), ["dedupe_applied"])


def test_rule8_disabled_detector_drops_adopted_entries_only_of_enabled_families() -> None:
    # No annotation, Ext4 disabled: the ExternalIP is foreign, so nothing is removed.
    out, owned, _ = _run("Ext 203.0.113.10", detections())
    assert out == addrs("Ext 203.0.113.10")
    assert owned == ()


def test_duplicate_pairs_in_current_collapse_to_the_first() -> None:
    out, _, _ = _run("Hostname n1, Hostname n1, Int 192.0.2.10", detections(), owned="")
    assert out == addrs("Int 192.0.2.10, Hostname n1")


# ------------------------------------------------------------------ ordering
def test_ipv6_first_family_order_a05() -> None:
    detected = detections(
        int4=found("192.0.2.10"),
        int6=found("2001:db8:1::10"),
        ext4=found("198.51.100.10"),
        ext6=found("2001:db8:2::10"),
    )
    out, _, _ = _run("", detected, policy=AddressPolicy(family_order=(6, 4)))
    assert out == addrs("Int 2001:db8:1::10, Int 192.0.2.10, Ext 2001:db8:2::10, Ext 198.51.100.10")


def test_order_within_type_and_family_is_provided_then_ours_then_foreign() -> None:
    out, _, _ = _run(
        "Hostname n1, Int 192.0.2.99, Int 192.0.2.5",
        detections(int6=found("2001:db8::10")),
        owned="",
        provided="192.0.2.5",
    )
    assert out == addrs("Int 192.0.2.5, Int 192.0.2.99, Int 2001:db8::10, Hostname n1")


def test_foreign_entries_keep_their_relative_order() -> None:
    current = "Ext 203.0.113.9, Ext 198.51.100.1, Ext 203.0.113.1"
    out, _, _ = _run(current, detections(), owned="")
    assert out == addrs(current)


def test_unparsable_ip_entries_sort_after_both_families() -> None:
    out, _, _ = _run("Int not-an-ip, Int 2001:db8::1, Int 192.0.2.1", detections(), owned="")
    assert out == addrs("Int 192.0.2.1, Int 2001:db8::1, Int not-an-ip")


@pytest.mark.parametrize(
    ("configured", "provided", "expected"),
    [
        ((), "", (4, 6)),
        ((), "2001:db8::1", (6, 4)),  # a single-family IPv6 --node-ip stays the primary
        ((), "2001:db8::1,192.0.2.1", (6, 4)),
        ((), "192.0.2.1,2001:db8::1", (4, 6)),
        ((6,), "192.0.2.1,2001:db8::1", (6, 4)),
        ((4, 6), "2001:db8::1,192.0.2.1", (4, 6)),
    ],
)
def test_family_order_from_flag_else_provided_annotation(
    configured: tuple[Family, ...], provided: str, expected: tuple[int, int]
) -> None:
    ips = [ip_address(p) for p in provided.split(",") if p]
    assert resolve_family_order(configured, ips) == expected
