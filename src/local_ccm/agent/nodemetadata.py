"""The Node's metadata labels for the loop: the rules in force and the machine's facts.

What to write is decided by ``core.decide`` (with ``core.labels``); this keeps the one piece of
I/O around it: the rules file, reloaded when it changed, the last good rules kept on a bad
reload (an Event and the reloads metric say so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from local_ccm.agent.core import events as ev
from local_ccm.agent.core.labels import LabelSetup
from local_ccm.agent.core.metadata import DEFAULT_LABEL_DOMAIN, Rules
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.rulesfile import RulesFile
from local_ccm.runtime.events import EventSpec

log = logging.getLogger(__name__)


class NodeMetadata:
    """``setup()`` once per pass: the labels' part of the decision's setup."""

    def __init__(
        self, source: RulesFile | Rules, facts: Mapping[str, str], *, beta: bool,
        metrics: AgentMetrics, domains: tuple[str, ...] = (DEFAULT_LABEL_DOMAIN,),
    ) -> None:  # fmt: skip
        self._source, self.facts, self.beta, self._metrics = source, dict(facts), beta, metrics
        self.domains = domains

    @property
    def rules(self) -> Rules:
        return self._source.rules if isinstance(self._source, RulesFile) else self._source

    def setup(self, emit: Callable[[EventSpec], object]) -> LabelSetup:
        """The rules in force, after reloading a changed file; a bad one keeps the last good
        rules, with an Event."""
        if isinstance(self._source, RulesFile):
            result = self._source.refresh()
            if result is not False:
                problems = None if result is True else result
                self._metrics.observe_rules_reload(problems)
                if problems is None:
                    log.info("metadata rules reloaded from %s", self._source.path)
                else:
                    log.warning("metadata rules not reloaded, the last good rules stay: %s",
                                "; ".join(problems))  # fmt: skip
                    emit(ev.rules_invalid(problems))
        return LabelSetup(self.rules, self.facts, self.beta, self.domains)
