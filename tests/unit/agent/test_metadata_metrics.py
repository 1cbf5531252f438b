"""The metadata rules metrics: valid 0/1 and reloads by result."""

from __future__ import annotations

from local_ccm.agent.metrics import AgentMetrics
from local_ccm.runtime.promtext import Registry


def test_rules_valid_follows_the_last_reload() -> None:
    registry = Registry()
    metrics = AgentMetrics(registry)
    assert registry.get_sample_value("local_ccm_agent_metadata_rules_valid") == 1
    metrics.observe_rules_reload(["rules[0]: missing name"])
    assert registry.get_sample_value("local_ccm_agent_metadata_rules_valid") == 0
    metrics.observe_rules_reload(None)
    assert registry.get_sample_value("local_ccm_agent_metadata_rules_valid") == 1
    for result in ("loaded", "invalid"):
        name = "local_ccm_agent_metadata_rules_reloads_total"
        assert registry.get_sample_value(name, {"result": result}) == 1
