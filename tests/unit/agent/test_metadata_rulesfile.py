"""The rules file: load errors listed with the file name, reload keeps the last good rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from local_ccm.agent.core.metadata import ZONE, Rules
from local_ccm.agent.rulesfile import RulesFile, load_rules

GOOD = "rules:\n  - name: a\n    zone: z1\n"


def test_yaml_syntax_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - name: a\n   zone: [\n")
    problems = load_rules(path)
    assert isinstance(problems, list)
    assert problems[0].startswith(f"{path}: not valid YAML at line ")


def test_a_missing_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    problems = load_rules(tmp_path / "absent.yaml")
    assert isinstance(problems, list)
    assert "cannot read" in problems[0]


def test_reload_picks_up_a_configmap_style_symlink_swap(tmp_path: Path) -> None:
    first, second = tmp_path / "..2026_1", tmp_path / "..2026_2"
    first.mkdir()
    second.mkdir()
    (first / "rules.yaml").write_text(GOOD)
    (second / "rules.yaml").write_text(GOOD.replace("z1", "z2"))
    os.symlink(first.name, tmp_path / "..data")
    os.symlink("..data/rules.yaml", tmp_path / "rules.yaml")
    opened = RulesFile.open(tmp_path / "rules.yaml", ("local-ccm.io",))
    assert isinstance(opened, RulesFile)
    assert opened.reload() is None
    before = opened.rules
    os.symlink(second.name, tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert opened.reload() is None
    assert opened.rules != before
    assert opened.rules.rules[0].sets[ZONE].text == "z2"


def test_a_bad_reload_keeps_the_last_good_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(GOOD)
    opened = RulesFile.open(path, ("local-ccm.io",))
    assert isinstance(opened, RulesFile)
    good = opened.rules
    path.write_text("rules:\n  - name: a\n    zone: 'not valid!'\n    colour: red\n")
    problems = opened.reload()
    assert problems is not None
    assert len(problems) == 2
    assert opened.rules == good
    assert opened.reload() is None  # reported once per change, not on every tick
    assert isinstance(opened.rules, Rules)


def test_refresh_says_whether_new_rules_are_in_force(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(GOOD)
    opened = RulesFile.open(path, ("local-ccm.io",))
    assert isinstance(opened, RulesFile)
    assert opened.refresh() is False
    path.write_text(GOOD.replace("z1", "z2") + "\n")
    assert opened.refresh() is True
    path.write_text("rules: [{zone: z3}]\n")
    problems = opened.refresh()
    assert isinstance(problems, list)
    assert problems
    assert opened.rules.rules[0].sets[ZONE].text == "z2"


def test_json_rules_are_read_without_loading_the_yaml_parser(tmp_path: Path) -> None:
    """The chart writes JSON: the agent's memory budget has no room for PyYAML."""
    path = tmp_path / "rules.yaml"
    path.write_text('{"rules": [{"name": "r", "zone": "z1"}]}')
    code = (
        "import sys; from pathlib import Path; from local_ccm.agent.rulesfile import load_rules; "
        f"rules = load_rules(Path({str(path)!r})); "
        "print(rules.rules[0].name, 'yaml' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=30)  # fmt: skip
    assert done.stdout.split() == ["r", "False"]


def test_a_key_given_twice_in_yaml_is_refused_naming_its_line(tmp_path: Path) -> None:
    """safe_load keeps the last of two equal keys: the first rule's zone would be lost."""
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - name: a\n    zone: z1\n    zone: z2\n")
    problems = load_rules(path)
    assert problems == [f"{path}: duplicate key 'zone' at line 4, column 5"]


def test_a_key_given_twice_in_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text('{"rules": [{"name": "a", "zone": "z1", "zone": "z2"}]}')
    assert load_rules(path) == [f'{path}: duplicate key "zone" in one object']


def test_equal_keys_in_different_mappings_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - name: a\n    zone: z1\n  - name: b\n    zone: z2\n")
    rules = load_rules(path)
    assert isinstance(rules, Rules)
    assert [r.sets[ZONE].text for r in rules.rules] == ["z1", "z2"]


def test_broken_json_is_reported_as_json_too(tmp_path: Path) -> None:
    """The chart writes JSON: a broken one names the JSON error, not only YAML's."""
    path = tmp_path / "rules.json"
    path.write_text('{"rules": [{"name": "a",, "zone": "z1"}]}')
    problems = load_rules(path)
    assert isinstance(problems, list)
    assert problems[0].startswith(f"{path}: not valid YAML")
    assert problems[1].startswith(f"{path}: not valid JSON either: Expecting")


def test_an_unquoted_number_yaml_reads_as_another_is_refused_naming_its_line(
    tmp_path: Path,
) -> None:
    """YAML 1.1 reads 07 as 7, 010 as 8 and 1:30 as 90: rack 07 would become rack 7."""
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - {name: a, zone: 07, region: 1:30}\n  - {name: b, zone: 7}\n")
    assert load_rules(path) == [
        f"{path}: 07 at line 2, column 21 is read by YAML as the number 7; quote it ('07')",
        f"{path}: 1:30 at line 2, column 33 is read by YAML as the number 90; quote it ('1:30')",
    ]
    path.write_text("rules: [{name: a, zone: '07'}, {name: b, zone: 7}]\n")
    rules = load_rules(path)
    assert isinstance(rules, Rules)
    assert [r.sets[ZONE].text for r in rules.rules] == ["07", "7"]


def test_a_duplicate_key_is_listed_with_the_rules_own_problems(tmp_path: Path) -> None:
    """Every problem at once: fixing the duplicate must not reveal a second round."""
    path = tmp_path / "rules.yaml"
    path.write_text(
        "rules:\n  - name: a\n    zone: z1\n    zone: z2\n  - {name: b, zone: 'x y!'}\n"
    )
    assert load_rules(path) == [
        f"{path}: duplicate key 'zone' at line 4, column 5",
        f"{path}: rules[1] (b).zone: 'x y!' is not a valid label value",
    ]
    json_path = tmp_path / "rules.json"
    json_path.write_text('{"rules": [{"name": "a", "zone": "z1", "zone": "z2"}, {"name": "b!"}]}')
    problems = load_rules(json_path)
    assert isinstance(problems, list)
    assert len(problems) == 3  # the duplicate, the name, and "sets nothing"
