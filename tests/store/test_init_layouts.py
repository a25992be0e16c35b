"""``expgit init`` takes the skills layout by default, ``--layout flat`` keeps the old one,
``--from`` converts a seed in the other layout, and inside a code repository expgit is
added in one commit that touches nothing else: all through the real CLI, each SKILL.md
checked with the reference validator (``agentskills validate``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Driver, git, repo_state
from test_skills_layout import FLAKY, GUIDE, SCRIPT, agentskills_validate_main
from test_skills_layout import seed as skills_seed

from expgit.store.repository import ExperienceRepository

NAMES = sorted(p.parent.name for p in (EXAMPLE / "skills").glob("*/SKILL.md"))
BAGS = "checked-baggage-allowance"
REFUND = "refund-method-rules"
FLAT_MD = """---
name: pet-policy
status: draft
summary: Pets travel in the cabin only on flights under 6 hours.
tags: [pets, cabin]
always: true
metadata:
  owner: support-playbook
---
# Pet policy

Check the flight's duration first.
"""


def tree(path: Path, rev: str = "HEAD") -> dict[str, tuple[str, str]]:
    """``{path: (mode, object)}`` of every file of ``rev``'s tree."""
    found = {}
    for entry in git(path, "ls-tree", "-r", "-z", "--full-tree", rev).split("\0"):
        if entry:
            info, _, name = entry.partition("\t")
            mode, _, sha = info.split(" ")
            found[name] = (mode, sha)
    return found


# ------------------------------------------------------------------ a new repository
def test_a_new_repository_takes_the_skills_layout(run_cli: Any, tmp_path: Path) -> None:
    assert run_cli("init", tmp_path / "new").code == 0
    settings = git(tmp_path / "new", "show", "main:expgit.toml")
    assert 'experiences_root = "skills"\nlayout = "skills"\n' in settings
    assert list(tree(tmp_path / "new")) == ["expgit.toml", "skills/.gitkeep"]
    assert ExperienceRepository.open(tmp_path / "new").settings.layout == "skills"


def test_layout_flat_keeps_the_old_layout(run_cli: Any, tmp_path: Path) -> None:
    assert run_cli("init", tmp_path / "old", "--layout", "flat").code == 0
    settings = git(tmp_path / "old", "show", "main:expgit.toml")
    assert "layout" not in settings and 'experiences_root = "experiences"' in settings
    assert sorted(tree(tmp_path / "old")) == ["experiences/.gitkeep", "expgit.toml"]


@pytest.mark.slow
def test_from_example_repo_every_skill_passes_the_reference_validator(
        run_cli: Any, tmp_path: Path) -> None:
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    assert run_cli("init", d.path, "--from", EXAMPLE).code == 0
    assert agentskills_validate_main(d, tmp_path) == NAMES
    for name in NAMES:  # the seed's bytes, as they are
        assert d.git("show", f"main:skills/{name}/SKILL.md") == \
            (EXAMPLE / "skills" / name / "SKILL.md").read_text()
    assert "all experiences valid" in d.ok("validate").out
    rows = json.loads(d.ok("list", "--json").out)["experiences"]
    assert [r["name"] for r in rows] == NAMES


def test_a_flat_seed_is_converted_to_skills(run_cli: Any, tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    (seed / "experiences").mkdir(parents=True)
    (seed / "experiences" / "pet-policy.md").write_text(FLAT_MD)
    (seed / "experiences" / ".gitkeep").write_text("")
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    assert run_cli("init", d.path, "--from", seed).code == 0  # no expgit.toml: flat
    assert sorted(tree(d.path)) == ["expgit.toml", "skills/pet-policy/SKILL.md"]
    assert d.git("show", "main:skills/pet-policy/SKILL.md") == (
        "---\nname: pet-policy\n"
        "description: Pets travel in the cabin only on flights under 6 hours.\n"
        "metadata:\n  expgit-status: draft\n  expgit-tags: pets, cabin\n"
        "  expgit-always: 'true'\n  owner: support-playbook\n"
        "---\n# Pet policy\n\nCheck the flight's duration first.\n")
    fm = ExperienceRepository.open(d.path).snapshot().get("pet-policy")
    assert fm is not None
    got = fm.experience.front_matter
    assert (got.status, got.tags, got.always, got.metadata) == (
        "draft", ["pets", "cabin"], True, {"owner": "support-playbook"})
    assert agentskills_validate_main(d, tmp_path) == ["pet-policy"]


def test_a_skills_seed_is_converted_to_flat_with_layout_flat(run_cli: Any,
                                                            tmp_path: Path) -> None:
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    assert run_cli("init", d.path, "--from", EXAMPLE, "--layout", "flat").code == 0
    assert sorted(tree(d.path)) == [*(f"experiences/{n}.md" for n in NAMES), "expgit.toml"]
    assert 'experiences_root = "experiences"\nlayout = "flat"\n' in d.git(
        "show", "main:expgit.toml")
    text = d.git("show", f"main:experiences/{REFUND}.md")
    assert text.startswith(f"---\nname: {REFUND}\nstatus: active\nsummary: Refunds always")
    assert "tags:\n- refunds\n- payments\n- policy\n" in text
    # and back: the flat repository's files as a seed give the example's skills again
    assert run_cli("init", tmp_path / "again", "--from", d.path).code == 0
    for name in NAMES:
        assert git(tmp_path / "again", "show", f"main:skills/{name}/SKILL.md") == \
            (EXAMPLE / "skills" / name / "SKILL.md").read_text()


@pytest.mark.parametrize("problem", ["asset", "no-summary"])
def test_a_seed_that_cannot_be_converted_is_refused(run_cli: Any, tmp_path: Path,
                                                    problem: str) -> None:
    seed = tmp_path / "seed"
    if problem == "asset":  # a skill's other file has no place in the flat layout
        shutil.copytree(EXAMPLE / "skills", seed / "skills")
        guide = seed / "skills" / REFUND / "references" / "guide.md"
        guide.parent.mkdir()
        guide.write_text("# Guide\n")
        args, named = ["--layout", "flat"], guide
    else:  # the spec needs a description: a flat file without summary cannot be a skill
        (seed / "experiences").mkdir(parents=True)
        named = seed / "experiences" / "bare-rule.md"
        named.write_text("---\nname: bare-rule\n---\nBody.\n")
        args = []
    result = run_cli("init", tmp_path / "new", "--from", seed, *args)
    assert result.code == 5, result.out + result.err
    assert str(named) in result.err
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------- a code repository
def code_repo(tmp_path: Path) -> Path:
    """A git repository with two commits of code on ``trunk``, a tracked link and an
    executable file among them."""
    path = tmp_path / "project"
    git(tmp_path, "init", "-q", "-b", "trunk", str(path))
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hello')\n")
    (path / "run.sh").write_text("#!/bin/sh\npython src/app.py\n")
    (path / "run.sh").chmod(0o755)
    os.symlink("src/app.py", path / "main.py")
    (path / ".claude").mkdir()
    (path / ".claude" / "settings.json").write_text('{"permissions": {}}\n')
    (path / "README.md").write_text("# Project\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    (path / "README.md").write_text("# Project\n\nIt prints hello.\n")
    git(path, "commit", "-q", "-am", "second")
    return path


ADDED = ["expgit.toml", ".claude/skills",
         *(f".agents/skills/{n}/SKILL.md" for n in NAMES)]


@pytest.mark.slow
def test_init_in_a_code_repository_adds_one_commit_and_touches_nothing_else(
        run_cli: Any, tmp_path: Path) -> None:
    path = code_repo(tmp_path)
    (path / "src" / "app.py").write_text("print('hello, world')\n")  # uncommitted
    before, old = tree(path), git(path, "rev-parse", "HEAD").strip()
    result = run_cli("-C", path, "init", ".", "--from", EXAMPLE, "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert (data["added_to"], data["experiences"], data["warnings"]) == ("trunk", 8, [])
    after = tree(path)
    # one commit on the checked-out branch, on top of what it was
    assert git(path, "rev-parse", "trunk").strip() == data["commit"]
    assert git(path, "rev-parse", "trunk^").strip() == old
    assert git(path, "symbolic-ref", "HEAD").strip() == "refs/heads/trunk"
    # every path that was there keeps its mode and blob; only expgit's paths are new
    assert {p: after[p] for p in before} == before
    assert sorted(set(after) - set(before)) == sorted(ADDED)
    assert after[".claude/skills"][0] == "120000"
    assert git(path, "cat-file", "blob", after[".claude/skills"][1]) == "../.agents/skills"
    settings = git(path, "show", "trunk:expgit.toml")
    assert 'experiences_root = ".agents/skills"\nlayout = "skills"\n' in settings
    assert 'main_branch = "trunk"' in settings
    # the working tree followed for the new paths; the uncommitted change is kept
    assert git(path, "status", "--porcelain") == " M src/app.py\n"
    assert (path / "src" / "app.py").read_text() == "print('hello, world')\n"
    assert os.readlink(path / ".claude" / "skills") == "../.agents/skills"
    assert sorted(p.name for p in (path / ".claude" / "skills").iterdir()) == NAMES
    # every skill passes the reference validator; expgit reads the repository
    d = Driver(run_cli, path, tmp_path / "scratch")
    assert agentskills_validate_main(d, tmp_path, ".agents/skills", "trunk") == NAMES
    assert "all experiences valid" in d.ok("validate").out
    assert [r["name"] for r in json.loads(d.ok("list", "--json").out)["experiences"]] == NAMES


def test_a_working_tree_in_the_way_is_left_as_it_was_with_a_warning(
        run_cli: Any, tmp_path: Path) -> None:
    path = code_repo(tmp_path)
    (path / "expgit.toml").write_text("# mine, untracked\n")
    result = run_cli("-C", path, "init", ".", "--from", EXAMPLE)
    assert result.code == 0, result.err
    assert "trunk moved to" in result.err and "it was left as it was" in result.err
    assert (path / "expgit.toml").read_text() == "# mine, untracked\n"
    assert not (path / ".agents").exists()
    assert sorted(set(tree(path)) - set(tree(path, "HEAD^"))) == sorted(ADDED)


@pytest.mark.parametrize("taken", [".claude/skills", ".agents", "expgit.toml"])
def test_a_path_already_there_is_refused_and_nothing_changes(run_cli: Any, tmp_path: Path,
                                                             taken: str) -> None:
    path = code_repo(tmp_path)
    (path / taken).parent.mkdir(parents=True, exist_ok=True)
    (path / taken).write_text("mine\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", f"add {taken}")
    before, files = repo_state(path), git(path, "status", "--porcelain", "--ignored")
    result = run_cli("-C", path, "init", ".", "--from", EXAMPLE)
    want = 2 if taken == "expgit.toml" else 3  # already expgit's, or a clash
    assert result.code == want, result.out + result.err
    assert taken in result.err
    assert repo_state(path) == before
    assert git(path, "status", "--porcelain", "--ignored") == files
    assert not (path / ".git" / "hooks" / "pre-commit").exists()


def test_a_folder_that_is_not_a_git_repository_is_still_refused(run_cli: Any,
                                                                tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    assert run_cli("-C", folder, "init", ".", "--from", EXAMPLE).code == 2
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("state", ["detached", "no-commits", "layout-flat"])
def test_a_code_repository_it_cannot_add_to_is_refused(run_cli: Any, tmp_path: Path,
                                                       state: str) -> None:
    if state == "no-commits":
        path = tmp_path / "empty"
        git(tmp_path, "init", "-q", str(path))
        (path / "README.md").write_text("# Soon\n")
    else:
        path = code_repo(tmp_path)
    if state == "detached":
        git(path, "checkout", "-q", "--detach", "HEAD")
    before = repo_state(path)
    extra = ["--layout", "flat"] if state == "layout-flat" else []
    result = run_cli("-C", path, "init", ".", "--from", EXAMPLE, *extra)
    assert result.code == 2, result.out + result.err
    assert repo_state(path) == before


# ------------------------------------------- proposals meet the developers' commits
def added(tmp_path: Path, run_cli: Any) -> Driver:
    """A code repository that expgit was added to, driven by the CLI."""
    path = code_repo(tmp_path)
    assert run_cli("-C", path, "init", ".", "--from", EXAMPLE).code == 0
    return Driver(run_cli, path, tmp_path / "scratch")


def skill_text(d: Driver, name: str, rev: str = "trunk") -> str:
    return d.git("show", f"{rev}:.agents/skills/{name}/SKILL.md")


def test_a_developer_commit_between_propose_and_apply_is_rebased_over(
        run_cli: Any, tmp_path: Path) -> None:
    d = added(tmp_path, run_cli)
    new = skill_text(d, BAGS) + "\nA fourth bag costs 150 USD.\n"
    pid = d.merge(d.propose(BAGS, new))
    (d.path / "src" / "app.py").write_text("print('hello again')\n")
    d.git("commit", "-q", "-am", "developer: a code change")
    developer = d.rev("trunk")
    d.apply(pid)
    assert d.git("rev-parse", "trunk^").strip() == developer  # on top, not instead
    assert "Expgit-Rebased-From:" in d.git("log", "-1", "--format=%B", "trunk")
    assert skill_text(d, BAGS) == new
    assert d.git("show", "trunk:src/app.py") == "print('hello again')\n"
    assert (d.path / ".agents" / "skills" / BAGS / "SKILL.md").read_text() == new


def test_a_developer_edit_of_the_same_skill_makes_apply_refuse(run_cli: Any,
                                                               tmp_path: Path) -> None:
    d = added(tmp_path, run_cli)
    pid = d.merge(d.propose(BAGS, skill_text(d, BAGS) + "\nA fourth bag costs 150 USD.\n"))
    skill = d.path / ".agents" / "skills" / BAGS / "SKILL.md"
    skill.write_text(skill.read_text() + "\nNever waive bag fees.\n")
    d.git("commit", "-q", "-am", "developer: the bag rule by hand")
    before = d.state()
    result = d.fails(3, "apply", pid)
    assert BAGS in result.err
    assert d.state() == before


def test_a_proposal_goes_to_the_forge_with_pr(run_cli: Any, tmp_path: Path) -> None:
    d = added(tmp_path, run_cli)
    forge = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", str(forge))
    d.git("remote", "add", "origin", str(forge))
    d.git("push", "-q", "origin", "trunk")
    pid = d.merge(d.propose(BAGS, skill_text(d, BAGS) + "\nA fourth bag costs 150 USD.\n"))
    assert f"expgit/proposals/{pid}: pushed to origin" in d.ok("pr", pid, "--remote",
                                                               "origin").out
    assert git(forge, "rev-parse", f"expgit/proposals/{pid}").strip() == \
        d.rev(f"expgit/proposals/{pid}")
    assert git(forge, "rev-parse", "trunk").strip() == d.rev("trunk")  # main not moved


def test_a_skill_folder_moves_whole_into_the_code_repository(run_cli: Any,
                                                             tmp_path: Path) -> None:
    """A seed's skill keeps its other files, byte for byte, under .agents/skills/."""
    path = code_repo(tmp_path)
    seed = skills_seed(tmp_path)
    (seed / "skills" / FLAKY / ".notes").write_bytes(b"kept\n")
    assert run_cli("-C", path, "init", ".", "--from", seed).code == 0
    root = f"trunk:.agents/skills/{FLAKY}"
    assert git(path, "show", f"{root}/references/guide.md").encode() == GUIDE
    assert git(path, "show", f"{root}/scripts/run.sh").encode() == SCRIPT
    assert git(path, "show", f"{root}/.notes") == "kept\n"
    assert git(path, "show", f"{root}/SKILL.md") == \
        (seed / "skills" / FLAKY / "SKILL.md").read_text()
