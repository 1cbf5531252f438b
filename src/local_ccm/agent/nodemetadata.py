"""The Node's metadata labels for the reconciler: the rules in force, the machine's facts, and
what was already reported.

The decisions are pure (``core.metadata``, ``core.labels``); this keeps the little state around
them: the rules file (reloaded when it changed, the last good rules kept on a bad reload) and the
label conflicts already reported, so each conflict is one Event, not one per pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from local_ccm.agent.core import events as ev
from local_ccm.agent.core.addresses import NodeAddress
from local_ccm.agent.core.labels import Conflict, LabelPlan, address_ips, plan_node_labels
from local_ccm.agent.core.metadata import Rules
from local_ccm.agent.core.plan import Obj
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.rulesfile import RulesFile
from local_ccm.runtime.events import EventSpec

log = logging.getLogger(__name__)
Emit = Callable[[EventSpec, dict[str, Any] | None], bool]


class NodeMetadata:
    """``refresh()`` once per pass, ``plan()`` for the write, ``report()`` after it; ``refuse()``
    when the API server refused a write with labels."""

    def __init__(
        self, source: RulesFile | Rules, facts: Mapping[str, str], *, beta: bool,
        metrics: AgentMetrics,
    ) -> None:  # fmt: skip
        self._source, self.facts, self.beta, self._metrics = source, dict(facts), beta, metrics
        self._reported: frozenset[Conflict] = frozenset()
        self.refused: str | None = None  # the API refused a write with labels: paused

    @property
    def rules(self) -> Rules:
        return self._source.rules if isinstance(self._source, RulesFile) else self._source

    def refresh(self, emit: Emit) -> None:
        """Reload a changed rules file; a bad one keeps the last good rules, with an Event."""
        if not isinstance(self._source, RulesFile):
            return
        result = self._source.refresh()
        if result is False:
            return
        problems = None if result is True else result
        self._metrics.observe_rules_reload(problems)
        if problems is None:
            log.info("metadata rules reloaded from %s", self._source.path)
            self.refused = None  # new rules: try again
        else:
            log.warning("metadata rules not reloaded, the last good rules stay: %s",
                        "; ".join(problems))  # fmt: skip
            emit(ev.rules_invalid(problems), None)

    def refuse(self, message: str) -> None:
        """A write with labels was refused (an admission policy that allows fewer keys than
        the rules set, an invalid value): the labels wait for new rules, the taint does not."""
        log.error("metadata labels refused by the API server, paused until the rules change: %s",
                  message)  # fmt: skip
        self.refused = message

    def plan(self, node: Obj, addresses: Sequence[NodeAddress]) -> LabelPlan | None:
        if self.refused is not None:
            return None
        return plan_node_labels(
            node, address_ips(addresses), self.rules, self.facts, beta=self.beta
        )

    def report(self, plan: LabelPlan, node: dict[str, Any], emit: Emit, *, written: bool) -> None:
        """Log what was written; one Warning Event per new conflict."""
        if written and plan.changes:
            log.info("labels set %s, removed %s", dict(plan.set), list(plan.remove))
        events, self._reported = ev.label_conflicts(plan.conflicts, self._reported)
        for spec in events:
            log.warning("%s: %s", spec.reason, spec.message)
            emit(spec, node)
