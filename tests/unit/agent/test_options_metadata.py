"""The node metadata flags: defaults, the rules file opened at start, every problem listed."""

from __future__ import annotations

from collections.abc import Sequence

from local_ccm.agent.core.metadata import Rules
from local_ccm.agent.options import AgentOptions, MetadataOptions, startup_fields
from local_ccm.agent.rulesfile import RulesFile
from tests.support.options import load_agent as load_options
from tests.unit.agent.test_options import IN_CLUSTER, fake_resolve

GOOD = "/etc/local-ccm/rules.yaml"


def fake_open(path: str, label_domains: Sequence[str]) -> RulesFile | list[str]:
    """RulesFile.open's decisions without a file: any path but GOOD has two problems."""
    if path == GOOD:
        return RulesFile(path, Rules(rules=()), None, tuple(label_domains))
    return [f"{path}: rules[0]: missing name", f"{path}: rules[1]: unknown key 'zones'"]


def load(*argv: str) -> AgentOptions | list[str]:
    result = load_options(("--node-name=n1", *argv), IN_CLUSTER, resolve=fake_resolve,
                          open_rules=fake_open)  # fmt: skip
    return result if isinstance(result, AgentOptions) else [str(p) for p in result]


def test_default_is_on_without_rules() -> None:
    options = load()
    assert isinstance(options, AgentOptions)
    assert options.metadata == MetadataOptions(None, False, ("local-ccm.io",))
    assert startup_fields(options)["metadata"] == "dmi"


def test_metadata_false_turns_the_feature_off() -> None:
    options = load("--metadata=false")
    assert isinstance(options, AgentOptions)
    assert options.metadata is None
    assert startup_fields(options)["metadata"] == "off"


def test_a_metadata_setting_with_the_feature_off_is_a_mistake_not_a_no_op() -> None:
    """Rules given with --metadata=false would be ignored without a word."""
    problems = load("--metadata=false", f"--metadata-rules={GOOD}", "--metadata-beta-labels",
                    "--metadata-label-domains=a.example")  # fmt: skip
    assert isinstance(problems, list)
    assert len(problems) == 3
    for flag in ("--metadata-rules", "--metadata-beta-labels", "--metadata-label-domains"):
        [line] = [p for p in problems if flag in p]
        assert "only used with --metadata=true" in line


def test_rules_file_is_opened_with_the_label_domains() -> None:
    options = load(f"--metadata-rules={GOOD}", "--metadata-label-domains=a.example,b.example",
                   "--metadata-beta-labels")  # fmt: skip
    assert isinstance(options, AgentOptions)
    assert options.metadata is not None
    rules = options.metadata.rules
    assert rules is not None
    assert rules.label_domains == ("a.example", "b.example")
    assert options.metadata.beta_labels
    assert startup_fields(options)["metadata"] == GOOD


def test_invalid_rules_file_lists_every_problem() -> None:
    assert load("--metadata-rules=/bad.yaml") == [
        "invalid flag --metadata-rules: /bad.yaml: rules[0]: missing name",
        "invalid flag --metadata-rules: /bad.yaml: rules[1]: unknown key 'zones'",
    ]


def test_invalid_label_domain_is_reported_and_the_file_not_opened() -> None:
    lines = load("--metadata-rules=/bad.yaml", "--metadata-label-domains=Not_A_Domain")
    assert isinstance(lines, list)
    assert len(lines) == 1
    assert lines[0].startswith("invalid flag --metadata-label-domains: ")
