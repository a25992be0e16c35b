"""``expgit migrate --to skills`` (issue 33 item 2): one proposal that moves a flat
repository to Agent Skills folders, reviewed as renames, applied and reverted like any
other, with each experience's history going on across the move."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Driver, git, repo_state
from json_shapes import assert_shape
from skills_support import AGENTSKILLS
from test_skills_layout import agentskills_validate_main

from expgit.init import init_repository

REFUND_MD = """---
name: refund-rules
status: active
summary: Decide the refund method for a cancelled booking.
tags: [billing, refunds]
always: true
metadata:
  owner: ops
  priority: 2
---
Refund to the original payment method.
"""
FLAKY_MD = """---
name: flaky-tests
status: draft
summary: ""
---
# Fix flaky tests

Rerun the test alone first.
"""
PLAIN_MD = """---
name: baggage-rules
summary: Count the free checked bags from the membership tier.
---
Gold members get three free bags.
"""


def flat_seed(tmp: Path, extra: dict[str, str] | None = None) -> Path:
    folder = tmp / "seed"
    (folder / "experiences").mkdir(parents=True)
    (folder / "expgit.toml").write_text(
        '# settings\nexperiences_root = "experiences"\ntoken_budget = 2000\n\n'
        '[context]\ntoken_budget = 3000\n')
    files = {"refund-rules": REFUND_MD, "flaky-tests": FLAKY_MD, "baggage-rules": PLAIN_MD}
    for name, text in (files | (extra or {})).items():
        (folder / "experiences" / f"{name}.md").write_text(text)
    return folder


@pytest.fixture
def flat(run_cli: Any, tmp_path: Path) -> Driver:
    init_repository(tmp_path / "repo", seed=flat_seed(tmp_path), layout="flat")
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    # one edit before the move: refund-rules is at version 2
    new = REFUND_MD.replace("method.\n", "method, never a voucher.\n")
    gid = d.ok("propose", "refund-rules", "--content-file", d.file(new),
               "--rationale", "vouchers are compensation").out.strip()
    d.ok("apply", d.ok("merge", gid).out.strip())
    return d


def listed(d: Driver) -> dict[str, dict[str, Any]]:
    rows = json.loads(d.ok("list", "--json").out)
    return {r["name"]: r for r in (rows["experiences"] if isinstance(rows, dict) else rows)}


def test_a_flat_repository_migrates_as_one_reviewed_proposal(flat: Driver,
                                                             tmp_path: Path) -> None:
    d = flat
    before_main, before_refund = d.rev(), d.git("rev-parse", "main:experiences/refund-rules.md")
    assert listed(d)["refund-rules"]["version"] == 2
    made = json.loads(d.ok("migrate", "--to", "skills", "--json").out)
    assert_shape("migrate", made)
    pid = made["proposal"]["id"]
    assert {"experience": "refund-rules", "from": "experiences/refund-rules.md",
            "to": "skills/refund-rules/SKILL.md"} in made["renames"]
    assert d.rev() == before_main  # a proposal: main is not moved
    assert d.git("rev-parse", f"expgit/proposals/{pid}").startswith(pid)

    review = d.ok("review", pid).out
    assert "rename experiences/refund-rules.md -> skills/refund-rules/SKILL.md" in review
    assert "-summary: Decide the refund method for a cancelled booking." in review
    assert "+description: Decide the refund method for a cancelled booking." in review
    assert "+  expgit-tags: billing, refunds" in review
    assert '+layout = "skills"' in review
    diffs = json.loads(d.ok("review", pid, "--json").out)["diffs"]
    assert diffs["refund-rules"].startswith(
        "--- a/experiences/refund-rules.md\n+++ b/skills/refund-rules/SKILL.md\n")
    assert "\n Refund to the original" in diffs["refund-rules"]  # the body: context only
    assert "flaky-tests" in d.ok("review", pid).out  # its made-up description is named

    d.ok("apply", pid)
    assert pid in {p["id"] for p in json.loads(
        d.ok("proposals", "--state", "applied", "--json").out)["proposals"]}
    assert json.loads(d.ok("proposals", "--json").out)["proposals"] == []
    assert d.git("ls-tree", "-r", "--name-only", "main").split() == [
        "AGENTS.md", "expgit.toml", "skills/baggage-rules/SKILL.md",
        "skills/flaky-tests/SKILL.md", "skills/refund-rules/SKILL.md"]
    # the always-on skill's block of AGENTS.md comes in the migration's own commit
    agents = d.git("show", "main:AGENTS.md")
    assert "refund-rules" in agents and "Refund to the original payment method" in agents
    assert "baggage-rules" not in agents
    toml = d.git("show", "main:expgit.toml")
    assert 'experiences_root = "skills"\nlayout = "skills"\n' in toml
    assert "[context]\ntoken_budget = 3000\n" in toml  # the other lines kept
    assert agentskills_validate_main(d, tmp_path / "out") == [
        "baggage-rules", "flaky-tests", "refund-rules"]
    skill = d.git("show", "main:skills/refund-rules/SKILL.md")
    assert "metadata:\n  expgit-status: active\n  expgit-tags: billing, refunds\n" in skill
    assert "  expgit-always: 'true'\n" in skill and "  priority: '2'\n" in skill
    flaky = d.git("show", "main:skills/flaky-tests/SKILL.md")
    assert "description: Fix flaky tests\n" in flaky and "expgit-status: draft" in flaky

    # list, show, context and validate read the skills; versions count from before
    rows = listed(d)
    assert rows["refund-rules"]["version"] == 3 and rows["baggage-rules"]["version"] == 2
    assert rows["flaky-tests"]["status"] == "draft"
    d.ok("validate")
    assert "never a voucher" in d.ok("context", "how do I refund a cancelled booking").out
    log = json.loads(d.ok("log", "refund-rules", "--json").out)
    updates = log["updates"] if isinstance(log, dict) else log
    assert [u["kind"] for u in updates] == ["migration", "proposal", "init"]
    assert "summary: Decide" in d.ok("show", "refund-rules", "--version", "1").out
    assert "never a voucher" in d.ok("show", "refund-rules", "--version", "2").out

    # already in the skills layout: one line, nothing written
    state = repo_state(d.path)
    again = d.ok("migrate", "--to", "skills")
    assert again.out == "already in the skills layout; nothing to migrate\n"
    assert repo_state(d.path) == state
    noop = json.loads(d.ok("migrate", "--to", "skills", "--json").out)
    assert_shape("migrate", noop)
    assert noop["migrated"] is False and noop["proposal"] is None

    # revert restores the flat layout, byte for byte
    d.ok("revert", "main")
    assert d.git("ls-tree", "-r", "--name-only", "main").split() == [
        "experiences/baggage-rules.md", "experiences/flaky-tests.md",
        "experiences/refund-rules.md", "expgit.toml"]
    assert d.git("rev-parse", "main:experiences/refund-rules.md") == before_refund
    assert 'layout = "skills"' not in d.git("show", "main:expgit.toml")
    assert listed(d)["refund-rules"]["version"] == 4
    d.ok("validate")
    # migrated again: the versions go on (here derived from the cached ones of the
    # first migration, across the revert: the same process)
    d.ok("apply", d.ok("migrate", "--to", "skills").out.strip())
    assert listed(d)["refund-rules"]["version"] == 5
    assert "never a voucher" in d.ok("show", "refund-rules", "--version", "2").out


@pytest.mark.parametrize(("name", "text", "why"), [
    ("claude-tips", "---\nname: claude-tips\nsummary: Tips.\n---\nBody.\n", "reserved"),
    ("long-summary", "---\nname: long-summary\nsummary: " + "word " * 230 + "\n---\nB.\n",
     "1024"),
    ("comma-tag", "---\nname: comma-tag\nsummary: S.\ntags: ['a,b']\n---\nB.\n", "comma"),
    ("nested-meta", "---\nname: nested-meta\nsummary: S.\nmetadata:\n  a:\n    b: 1\n"
     "---\nB.\n", "metadata.a"),
    ("empty-body", "---\nname: empty-body\nsummary: ''\n---\n\n", "summary is empty"),
])
def test_an_experience_that_cannot_be_a_skill_stops_the_migration(
        run_cli: Any, tmp_path: Path, name: str, text: str, why: str) -> None:
    init_repository(tmp_path / "repo", seed=flat_seed(tmp_path, {name: text}),
                    layout="flat")
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    state = repo_state(d.path)
    failed = d.fails(5, "migrate", "--to", "skills")
    assert f"experiences/{name}.md" in failed.err and why in failed.err
    assert repo_state(d.path) == state  # no ref, no object


def test_a_bare_repository_migrates(run_cli: Any, tmp_path: Path) -> None:
    server = tmp_path / "server.git"
    init_repository(server, bare=True, seed=flat_seed(tmp_path), layout="flat")
    d = Driver(run_cli, server, tmp_path / "scratch")
    pid = d.ok("migrate", "--to", "skills", "--root", ".agents/skills").out.strip()
    d.ok("apply", pid)
    assert git(server, "ls-tree", "-r", "--name-only", "main", ".agents/").split() == [
        ".agents/skills/baggage-rules/SKILL.md", ".agents/skills/flaky-tests/SKILL.md",
        ".agents/skills/refund-rules/SKILL.md"]
    assert set(listed(d)) == {"baggage-rules", "flaky-tests", "refund-rules"}
    d.ok("validate")


def test_the_migration_is_rebuilt_on_a_moved_main_and_refused_on_a_conflict(
        flat: Driver) -> None:
    d = flat
    pid = d.ok("migrate", "--to", "skills").out.strip()
    # main moves by a file outside the experiences: the migration is rebuilt on it
    (d.path / "NOTES.txt").write_text("notes\n")
    d.git("add", "NOTES.txt")
    d.git("commit", "-qm", "notes")
    result = json.loads(d.ok("apply", pid, "--json").out)
    assert result["rebased"] is True
    assert "NOTES.txt" in d.git("ls-tree", "--name-only", "main").split()
    assert listed(d)["refund-rules"]["version"] == 3
    # a migration planned before an edit of an experience: exit 3, nothing written
    d.ok("revert", "main")
    pid = d.ok("migrate", "--to", "skills").out.strip()
    new = PLAIN_MD.replace("three", "four")
    d.ok("apply", d.ok("merge", d.ok("propose", "baggage-rules", "--content-file",
                                      d.file(new), "--rationale", "r").out.strip()
                       ).out.strip())
    state = repo_state(d.path)
    assert "baggage-rules" in d.fails(3, "apply", pid).err
    assert repo_state(d.path) == state


def test_agentskills_reads_what_the_migration_wrote_with_a_kept_root(
        flat: Driver, tmp_path: Path) -> None:
    """--root experiences keeps the root: experiences/<name>.md becomes
    experiences/<name>/SKILL.md, and the reference validator accepts every file."""
    d = flat
    d.ok("apply", d.ok("migrate", "--to", "skills", "--root", "experiences").out.strip())
    out = d.path  # main's working tree follows the apply
    assert not (out / "experiences" / "refund-rules.md").exists()
    for name in ("baggage-rules", "flaky-tests", "refund-rules"):
        proc = subprocess.run([str(AGENTSKILLS), "validate", str(out / "experiences" / name)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, (name, proc.stderr)
    assert listed(d)["refund-rules"]["version"] == 3
