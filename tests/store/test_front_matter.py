"""Changing front matter fields keeps the bytes of the fields left alone (issue 24: a
flow list ``tags: [a, b]`` that no edit touched came back as a block list)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from conftest import EXAMPLE

from expgit.store.format.experience import parse_experience
from expgit.store.format.front_matter import replace_fields

EXAMPLE_FILES = sorted((EXAMPLE / "skills").glob("*/SKILL.md"))
PATH = "experiences/sample-rule.md"


def changed_lines(old: str, new: str) -> list[str]:
    return [line for line in difflib.unified_diff(old.splitlines(), new.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.parent.name for p in EXAMPLE_FILES])
def test_a_new_summary_changes_only_its_line(path: Path) -> None:
    text = path.read_text()
    old = parse_experience(text, str(path))
    new = old.with_fields(summary="Check the rule: then act.").render()
    assert changed_lines(text, new) == [  # a SKILL.md's summary is its description
        f"-description: {old.front_matter.summary}",
        "+description: 'Check the rule: then act.'"]
    assert parse_experience(new, str(path)).front_matter.tags == old.front_matter.tags


def test_new_tags_keep_the_flow_style_and_the_other_lines() -> None:
    text = ("---\nname: sample-rule\n# who owns it\nstatus: active\nsummary: \"A sample.\"\n"
            "tags: [a, b]\nmetadata:\n  owner: me   # a comment\n---\n# Body\n")
    exp = parse_experience(text, PATH)
    new = exp.with_fields(tags=["a", "b", "c d"]).render()
    assert changed_lines(text, new) == ["-tags: [a, b]", "+tags: [a, b, c d]"]
    block = text.replace("tags: [a, b]\n", "tags:\n- a\n- b\n\n# kept\n")
    moved = parse_experience(block, PATH).with_fields(tags=["z"]).render()
    assert changed_lines(block, moved) == ["-- a", "-- b", "+- z"]
    assert "\n\n# kept\nmetadata:" in moved


def test_a_field_the_file_lacks_is_added_at_the_end() -> None:
    text = "---\nname: sample-rule\ntags: [x]\n---\nbody\n"
    new = parse_experience(text, PATH).with_fields(status="deprecated").render()
    assert new == "---\nname: sample-rule\ntags: [x]\nstatus: deprecated\n---\nbody\n"


@pytest.mark.parametrize("raw", [
    "{name: sample-rule, tags: [a]}\n",  # a flow mapping
    "name: sample-rule\n  tags: [a]\n",  # not YAML
    "name: sample-rule",  # no final newline
])
def test_front_matter_it_cannot_edit_faithfully_is_left_to_the_caller(raw: str) -> None:
    assert replace_fields(raw, {"tags": ["b"]}) is None


def test_a_flow_mapping_front_matter_is_written_anew() -> None:
    text = "---\n{name: sample-rule, tags: [a]}\n---\nbody\n"
    new = parse_experience(text, PATH).with_fields(tags=["b"]).render()
    back = parse_experience(new, PATH)
    assert back.front_matter.tags == ["b"] and back.body == "body\n"
    assert new.startswith("---\nname: sample-rule\n")  # the whole front matter, dumped


def test_an_edited_file_reads_back_with_the_new_values() -> None:
    text = "---\nname: sample-rule\nsummary: >-\n  folded\n  text\ntags: [a]\n---\nbody\n"
    exp = parse_experience(text, PATH)
    new = exp.with_fields(summary="New: with a colon", metadata={"k": [1, 2]}).render()
    back = parse_experience(new, PATH)
    assert back.front_matter.summary == "New: with a colon"
    assert back.front_matter.metadata == {"k": [1, 2]}
    assert "tags: [a]\n" in new and "folded" not in new


def test_a_flat_experiences_own_metadata_keeps_its_yaml_values() -> None:
    text = "---\nname: a-b\nsummary: s\nmetadata:\n  since: 2024-01-31\n  n: [1, 2]\n---\nbody\n"
    assert parse_experience(text, "a-b.md").render() == text
