"""What holds the taint and what the Node's condition says: the five taint gates, the provider
ID (set once), the AddressesSynced condition, the advice for a Node without an InternalIP, and
how a held taint is reported (gauges and Events).

Pure, no I/O, no clock. ``decide_gates`` is the one call ``core.decide`` (and detect mode) makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, get_args

from local_ccm.agent.core.addresses import AddressPlan, Finding, NodeAddress
from local_ccm.agent.core.candidates import Detected, Failed
from local_ccm.agent.core.config import (
    EXTERNAL,
    FAMILIES,
    INTERNAL,
    AgentConfig,
    IPAddress,
    family_name,
)
from local_ccm.agent.core.events import INITIALIZATION_BLOCKED, provider_id_mismatch
from local_ccm.agent.core.writes import Condition, Obj, addresses_match, is_tainted, node_inputs
from local_ccm.names import UNINITIALIZED_TAINT
from local_ccm.records import dataclass
from local_ccm.runtime.events import EventSpec

BlockReason = Literal["no_internal_ip", "provided_node_ip_mismatch", "provider_id_unavailable"]
BLOCK_REASONS: tuple[BlockReason, ...] = get_args(BlockReason)
MAX_MESSAGE = 1024
NO_INTERNAL_IP = (
    "no InternalIP: set --internal-ip-target or --internal-ip-cidrs, "
    "or start the kubelet with --node-ip"
)


# ------------------------------------------------------------------ taint gates
@dataclass(frozen=True)
class TaintDecision:
    remove: bool
    blocked: tuple[BlockReason, ...] = ()  # reported while the taint is held
    waiting_for_addresses: bool = False  # gate 2: the status write has not landed


def decide_taint(
    config: AgentConfig,
    *,
    tainted: bool,
    addresses_synced: bool,
    plan: AddressPlan,
    provider_id_blocks: bool = False,
) -> TaintDecision:
    """The five gates of taint removal: enabled and tainted, addresses synced, an IP, no strict
    --node-ip mismatch, the provider ID. Addresses are written before the taint goes, unlike the
    upstream cloud node controller, which leaves a schedulable Node without addresses for a
    while (kubernetes/kubernetes#120720). ``provider_id_blocks``: a configured template has an
    empty placeholder (Azure's "not Azure" never blocks)."""
    if not (config.remove_taint and tainted):
        return TaintDecision(False)
    blocked: list[BlockReason] = []
    if not has_ip(plan.addresses, internal_only=config.require_internal_ip):
        blocked.append("no_internal_ip")
    mismatch = any(f.kind == "provided_mismatch" for f in plan.findings)
    if config.provided_node_ip_policy == "strict" and mismatch:
        blocked.append("provided_node_ip_mismatch")
    if provider_id_blocks:
        blocked.append("provider_id_unavailable")
    remove = addresses_synced and not blocked
    return TaintDecision(remove, tuple(blocked), waiting_for_addresses=not addresses_synced)


@dataclass(frozen=True)
class Gates:
    """One Node's taint decision, its provider-ID action and the NoInternalIP advice."""

    taint: TaintDecision
    provider: ProviderIDAction
    advice: str


def decide_gates(
    node: Obj, plan: AddressPlan, config: AgentConfig, *, template: str, fetched: str | None
) -> Gates:
    """The gates for this Node and plan; ``template``, ``fetched``: :func:`desired_provider_id`."""
    provider = desired_provider_id(node, template=template, fetched=fetched)
    taint = decide_taint(
        config,
        tainted=is_tainted(node),
        addresses_synced=addresses_match(node, plan),
        plan=plan,
        provider_id_blocks=provider.kind == "unavailable",
    )
    return Gates(taint, provider, advise_no_internal_ip(node, plan, config))


# ------------------------------------------------------------------ provider ID
def render_provider_id(template: str, node: Obj) -> str | None:
    """Fill placeholders from the Node; None when a used placeholder is empty."""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    values = {
        "{node_name}": str(node.get("metadata", {}).get("name") or ""),
        "{system_uuid}": str(info.get("systemUUID") or "").lower(),
        "{machine_id}": str(info.get("machineID") or ""),
    }
    for placeholder, value in values.items():
        if placeholder in template:
            if not value:
                return None
            template = template.replace(placeholder, value)
    return template


@dataclass(frozen=True)
class ProviderIDAction:
    kind: Literal["none", "set", "mismatch", "unavailable"]
    value: str | None = None  # the value to set, or the configured value on a mismatch
    existing: str | None = None


def provider_id_action(node: Obj, desired: str | None, *, configured: bool) -> ProviderIDAction:
    """Set-once (kubernetes/kubernetes#51761): write only when empty, report a mismatch;
    ``desired`` None: a placeholder was empty, or Azure is not available."""
    existing = (node.get("spec") or {}).get("providerID") or None
    if not configured:
        return ProviderIDAction("none", existing=existing)
    if existing is not None:
        kind: Literal["none", "mismatch"] = "none" if desired in (None, existing) else "mismatch"
        return ProviderIDAction(kind, desired, existing)
    return ProviderIDAction("set", desired) if desired else ProviderIDAction("unavailable")


def desired_provider_id(node: Obj, *, template: str, fetched: str | None) -> ProviderIDAction:
    """The action for a --provider-id ``template``, else a value ``fetched`` from instance
    metadata (Azure; None: not Azure, nothing configured or given up: never blocks)."""
    if template:
        return provider_id_action(node, render_provider_id(template, node), configured=True)
    return provider_id_action(node, fetched, configured=fetched is not None)


# ------------------------------------------------------------------ condition
_FAILURE_REASONS = {
    "no_route": "NoRoute",
    "no_eligible_address": "NoEligibleAddress",
    "netlink_error": "NetlinkError",
}
PROVIDED_REASONS = {  # Finding kind -> condition reason and Event reason
    "provided_mismatch": "ProvidedNodeIPMismatch",
    "unparsable_provided": "ProvidedNodeIPUnparsable",
}
_REASON_ORDER = (
    "KubeletOwnsAddresses", "NoInternalIP", "ProvidedNodeIPMismatch",
    "ProvidedNodeIPUnparsable", "ProviderIDUnavailable", "NoRoute", "NoEligibleAddress",
    "NetlinkError",
)  # fmt: skip


def desired_condition(
    plan: AddressPlan,
    detected: Detected,
    *,
    blocked: Sequence[BlockReason] = (),
    conflict_manager: str | None = None,
    no_internal_ip: str = NO_INTERNAL_IP,
) -> Condition:
    """Highest-priority reason; the message lists every problem in that order (deterministic).

    ``blocked`` names the gates that hold the taint now. ``NoInternalIP`` means gate 3
    holds it, or the list has no IP at all (a gate-3 failure under any setting); a Node
    initialised with an ExternalIP only is not a problem here, the loop warns about it.
    """
    problems: list[tuple[str, str]] = []
    if conflict_manager is not None:
        why = f"status.addresses keeps being reverted by {conflict_manager}"
        fix = "start the kubelet with --cloud-provider=external"
        problems.append(("KubeletOwnsAddresses", f"{why}; {fix}"))
    if "no_internal_ip" in blocked or not has_ip(plan.addresses):
        problems.append(("NoInternalIP", no_internal_ip))
    for f in plan.findings:
        if f.kind in PROVIDED_REASONS:
            problems.append((PROVIDED_REASONS[f.kind], f.message))
    if "provider_id_unavailable" in blocked:
        problems.append(("ProviderIDUnavailable", "provider ID template has an empty value"))
    kept = {(f.type, f.family): f.address for f in plan.findings if f.kind == "kept_last_good"}
    for (kind, family), d in sorted(detected.items()):
        if isinstance(d, Failed):
            keeping = f"; keeping {kept[(kind, family)]}" if (kind, family) in kept else ""
            detail = f"{kind} {family_name(family)}: {d.detail or d.reason}{keeping}"
            problems.append((_FAILURE_REASONS[d.reason], detail))
    if not problems:
        return Condition("True", "AddressesSynced", "every enabled detector found an address")
    problems.sort(key=lambda p: _REASON_ORDER.index(p[0]))
    message = "; ".join(m for _, m in problems)
    return Condition("False", problems[0][0], message[:MAX_MESSAGE])


def has_ip(addresses: Sequence[NodeAddress], *, internal_only: bool = False) -> bool:
    """Gate 3's test: an InternalIP, or (by default) an InternalIP or ExternalIP."""
    wanted = {INTERNAL} if internal_only else {INTERNAL, EXTERNAL}
    return any(a.type in wanted for a in addresses)


# ------------------------------------------------------------------ NoInternalIP advice
def no_internal_ip_advice(
    config: AgentConfig, provided: Sequence[IPAddress], findings: Sequence[Finding]
) -> str:
    """What to change when the Node has no InternalIP. Advice to set a flag that is already set
    sends the operator in circles, so the flags in use are named and the fix fits the case."""
    detecting = _internal_detection(config)
    node_ip = ",".join(str(ip) for ip in provided)
    mismatch = next((f for f in findings if f.kind == "provided_mismatch"), None)
    if mismatch is not None:
        wanted, found = mismatch.expected, mismatch.address
        return (
            f"no InternalIP: the kubelet's --node-ip is {wanted}, but {detecting or 'detection'} "
            f"selects {found} on this host; if {wanted} is not an address of this host, correct "
            f"the kubelet's --node-ip; if it is, change {detecting or 'the detection'} to "
            f"select it; or set --provided-node-ip-policy=ignore to use {found}"
        )
    if detecting and provided:
        return (
            f"no InternalIP: {detecting} finds no address and the kubelet's --node-ip {node_ip} "
            f"is not among the Node's addresses; change {detecting}"
        )
    if detecting:
        fix = "change it, or start the kubelet with --node-ip"
        return f"no InternalIP: {detecting} finds no address; {fix}"
    if provided:
        return (
            f"no InternalIP: the kubelet's --node-ip is {node_ip} but the Node has no InternalIP "
            "entry; set --internal-ip-target or --internal-ip-cidrs to select it"
        )
    return NO_INTERNAL_IP


def _internal_detection(config: AgentConfig) -> str:
    """The InternalIP detection flags as set, e.g. ``--internal-ip-target=192.0.2.1``."""
    internal = config.internal
    flags = []
    if internal.targets:
        flags.append("--internal-ip-target=" + ",".join(str(t) for t in internal.targets))
    if internal.include:
        cidrs = [*(str(n) for n in internal.include), *(f"!{n}" for n in internal.exclude)]
        flags.append("--internal-ip-cidrs=" + ",".join(cidrs))
    return " ".join(flags)


def advise_no_internal_ip(node: Obj, plan: AddressPlan, config: AgentConfig) -> str:
    """:func:`no_internal_ip_advice` for this Node and its plan."""
    return no_internal_ip_advice(config, node_inputs(node).provided, plan.findings)


# ------------------------------------------------------------------ reporting a held taint
_REMEDIES: Mapping[BlockReason, str] = {
    "no_internal_ip": NO_INTERNAL_IP,
    "provided_node_ip_mismatch": (
        "provided-node-ip mismatch with --provided-node-ip-policy=strict: fix the kubelet's "
        "--node-ip or the InternalIP detection, or use --provided-node-ip-policy=prefer"
    ),
    "provider_id_unavailable": (
        "provider ID unavailable: a --provider-id placeholder is empty on the Node"
    ),
}


def initialization_blocked(
    reasons: Iterable[BlockReason], *, no_internal_ip: str = NO_INTERNAL_IP
) -> list[EventSpec]:
    """One Warning per distinct gate, naming it and its remedy."""
    # `no_internal_ip` is the remedy that fits this Node: plan.no_internal_ip_advice().
    text = f"taint {UNINITIALIZED_TAINT} kept: "
    remedies = {**_REMEDIES, "no_internal_ip": no_internal_ip}
    return [EventSpec("Warning", INITIALIZATION_BLOCKED, text + remedies[r]) for r in reasons]


def provided_mismatches(findings: Iterable[Finding]) -> list[EventSpec]:
    """A provided node IP the agent cannot honour: it differs from the detected InternalIP,
    or the annotation does not parse (then it is ignored, which an operator must learn)."""
    return [
        EventSpec("Warning", PROVIDED_REASONS[f.kind], f.message)
        for f in findings
        if f.kind in PROVIDED_REASONS
    ]


@dataclass(frozen=True)
class GateReport:
    """Gauge values and Events for one decision's gates."""

    blocked: Mapping[str, int]  # local_ccm_agent_initialization_blocked{reason}
    mismatch: Mapping[str, int]  # local_ccm_agent_provided_node_ip_mismatch{family}
    events: tuple[EventSpec, ...]


def gate_report(node: Obj, plan: AddressPlan, gates: Gates) -> GateReport:
    """Never block silently: every held gate, mismatch and provider-ID conflict is reported,
    a missing InternalIP with the remedy that fits this Node."""
    blocked, provider = gates.taint.blocked, gates.provider
    held = set(blocked) if is_tainted(node) else set()
    mismatched = {f.family for f in plan.findings if f.kind == "provided_mismatch"}
    events = [
        *initialization_blocked(blocked if held else (), no_internal_ip=gates.advice),
        *provided_mismatches(plan.findings),
    ]
    if provider.kind == "mismatch" and provider.existing:
        events.append(provider_id_mismatch(provider.existing, provider.value))
    return GateReport(
        blocked={r: int(r in held) for r in BLOCK_REASONS},
        mismatch={family_name(f): int(f in mismatched) for f in FAMILIES},
        events=tuple(events),
    )
