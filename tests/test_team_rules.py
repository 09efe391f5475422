"""The team runs' pure rules, without a relay: memory sections, cycles, run ids, and how team and
pool definitions extend each other (docs/team-runs.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
import yaml

from oar.core import keys
from oar.core.errors import ActionError
from oar.team.agents import definitions
from oar.team.board import find_cycle
from oar.team.memory import dated_entry, replace_section
from oar.team.runs import checked_run_id


def test_it_replaces_a_section_up_to_the_next_heading_and_adds_a_new_one_at_the_end() -> None:
    document = "# Notes\n\nintro\n\n## stack\n\nReact\n### detail\nold\n\n## rules\n\n- tests\n"
    assert replace_section(document, "stack", "Vue") == "# Notes\n\nintro\n\n## stack\n\nVue\n\n## rules\n\n- tests\n"
    assert replace_section(document, "rules", "- none") == (
        "# Notes\n\nintro\n\n## stack\n\nReact\n### detail\nold\n\n## rules\n\n- none\n")
    assert replace_section(document, "new", "x").endswith("- tests\n\n## new\n\nx\n")
    assert replace_section("", "a", "b") == "## a\n\nb\n"


def test_a_heading_inside_a_code_fence_is_text() -> None:
    document = "## a\n\n```md\n## b\n```\n"
    assert replace_section(document, "b", "new") == document + "\n## b\n\nnew\n"
    assert replace_section(document, "a", "only") == "## a\n\nonly\n"


def test_a_dated_entry_is_always_added() -> None:
    now = datetime(2026, 3, 14, 9, 5, 7)
    twice = dated_entry(dated_entry("## a\n\nb\n", "one", now), "two", now)
    assert twice == "## a\n\nb\n\n## 2026-03-14 09:05:07 UTC\n\none\n\n## 2026-03-14 09:05:07 UTC\n\ntwo\n"


def test_it_finds_the_cycle_a_dependency_would_close() -> None:
    edges = {"c": ["b"], "b": ["a"], "a": ["c"]}
    assert find_cycle(edges, "a") == ["a", "c", "b", "a"]
    assert find_cycle({"a": ["b"], "b": []}, "a") is None
    assert find_cycle({"a": ["a"]}, "a") == ["a", "a"]


@pytest.mark.parametrize("run_id", ["2026-03-14-007-k3f9", "2026-03-14-007", "2024-02-29-999-zzzz"])
def test_run_ids_on_real_days_are_accepted(run_id: str) -> None:
    assert checked_run_id(f" {run_id} ") == run_id


@pytest.mark.parametrize("run_id", ["2026-02-29-001", "2026-13-01-001", "2026-03-14-07", "2026-03-14-007-K3F9",
                                    "2026-03-14-007-k3f", "../2026-03-14-007", "today"])
def test_other_run_ids_are_refused(run_id: str) -> None:
    with pytest.raises(ActionError) as refused:
        checked_run_id(run_id)
    assert "is not a team run id" in refused.value.message


def agents_of(text: str, base: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return definitions(yaml.safe_load(text), "agents.yml", base)


def test_extends_merges_blocks_and_agents_in_order_and_lists_replace() -> None:
    found = agents_of("""
shared:
  base: {tools: [Read], systemPrompt: Base., tags: [x]}
  reviewer: {tools: [Read, Comment]}
agents:
  a: {extends: [base, reviewer], name: A}
  b: {extends: a, description: Like a}
  c: {id: ignored}
""")
    assert found[0] == {"id": "a", "name": "A", "emoji": "", "description": "", "tags": ["x"],
                        "tools": ["Read", "Comment"], "systemPrompt": "Base."}
    assert found[1]["name"] == "A" and found[1]["description"] == "Like a" and found[1]["tools"] == ["Read", "Comment"]
    assert found[2] == {"id": "c", "name": "c", "emoji": "", "description": "", "tags": None, "tools": [],
                        "systemPrompt": ""}


def test_a_team_file_extends_the_pool_and_yaml_merge_keys_work() -> None:
    pool = {"fe": {"name": "Frontend", "emoji": "🎨", "description": "", "tags": None, "tools": ["Read"],
                   "systemPrompt": "UI."}}
    found = agents_of("""
common: &common {emoji: "🧪"}
agents:
  - {id: fe, extends: fe}
  - {id: qa, <<: *common, prompt: Test.}
""", pool)
    assert [(a["id"], a["name"], a["emoji"], a["systemPrompt"]) for a in found] == [
        ("fe", "Frontend", "🎨", "UI."), ("qa", "qa", "🧪", "Test.")]


@pytest.mark.parametrize(("text", "says"), [
    ("agents: {a: {extends: a}}", "goes round in a circle"),
    ("agents: {a: {extends: b}, b: {extends: a}}", "goes round in a circle"),
    ("agents: {a: {extends: nothing}}", "names no shared block or agent"),
    ("agents: {a: {tools: Read}}", "`tools` must be a list of text"),
    ("agents: {a: {name: [x]}}", "`name` must be text"),
    ("agents: [{name: no id}]", "needs an `id`"),
    ("agents: {'../x': {}}", "is not an agent id"),
    ("agents: [1, 2]", "needs an `id`"),
    ("shared: [1]\nagents: {}", "`shared` must map block names"),
])
def test_bad_definitions_are_refused_with_the_problem(text: str, says: str) -> None:
    with pytest.raises(ActionError) as refused:
        agents_of(text)
    assert says in refused.value.message and refused.value.message.startswith("agents.yml")


def test_the_thoughts_keys_keep_their_strings() -> None:
    assert keys.team_thoughts("oar", "2026-03-14-007") == "oar:team:thoughts:2026-03-14-007"
    assert keys.team_thought_seq("oar", "2026-03-14-007") == "oar:team:thoughtseq:2026-03-14-007"
