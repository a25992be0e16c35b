"""``expgit export --to DIR`` (issue 33 item 5): main's active skills written where the
agents read them, through the real CLI, into a project that has skills of its own."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Driver, git
from json_shapes import assert_shape
from skills_support import AGENTSKILLS, REFUND
from test_always_on import HEAD, TAIL, block_of, refund_with
from test_skills_layout import FLAKY, FLAKY_MD, GUIDE, SCRIPT, seed

from expgit.init import init_repository
from expgit.store import folder_files, skill_export
from expgit.store.format.always_on import START
from expgit.store.repository import ExperienceRepository

OWN = b"---\nname: our-own\ndescription: Use when deploying this project.\n---\nDeploy.\n"


@pytest.fixture
def skills(run_cli: Any, tmp_path: Path) -> Driver:
    init_repository(tmp_path / "repo", seed=seed(tmp_path))
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    run = d.path / f"skills/{FLAKY}/scripts/run.sh"
    run.chmod(0o755)  # an executable script, committed by hand
    git(d.path, "add", str(run))
    git(d.path, "commit", "-q", "-m", "run.sh is executable")
    return d


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a skill of its own, one for Claude Code only, and an AGENTS.md."""
    root = tmp_path / "project"
    (root / ".agents/skills/our-own").mkdir(parents=True)
    (root / ".agents/skills/our-own/SKILL.md").write_bytes(OWN)
    (root / ".claude/skills/claude-only").mkdir(parents=True)
    (root / ".claude/skills/claude-only/SKILL.md").write_bytes(OWN)
    (root / "AGENTS.md").write_bytes(HEAD + TAIL)
    return root


def state(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under ``root``: (mode, mtime in ns, content or link target)."""
    found = {}
    for here, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(here) / name
            info = path.lstat()
            data = os.readlink(path).encode() if path.is_symlink() else \
                path.read_bytes() if path.is_file() else b""
            found[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, data)
    return found


def export(d: Driver, to: Path, *args: str, code: int = 0) -> Any:
    result = d.fails(code, "export", "--to", to, *args, "--json") if code \
        else d.ok("export", "--to", to, *args, "--json")
    return json.loads(result.out) if code == 0 else result


def actions(data: Any) -> dict[str, str]:
    return {row["name"]: row["action"] for row in data["skills"]}


def test_export_into_a_project_with_a_skill_of_its_own(skills: Driver,
                                                       project: Path) -> None:
    own = state(project / ".agents/skills/our-own") | state(project / ".claude/skills")
    data = export(skills, project)
    assert_shape("export", data)
    assert actions(data) == {FLAKY: "added", REFUND: "added"}
    assert data["claude"] == "symlink" and data["commit"] == skills.rev()
    agents = project / ".agents/skills"
    assert (agents / FLAKY / "SKILL.md").read_bytes() == FLAKY_MD.encode()
    assert (agents / FLAKY / "references/guide.md").read_bytes() == GUIDE
    assert (agents / FLAKY / "scripts/run.sh").read_bytes() == SCRIPT
    assert (agents / FLAKY / "scripts/run.sh").stat().st_mode & stat.S_IXUSR
    assert not (agents / FLAKY / "SKILL.md").stat().st_mode & stat.S_IXUSR
    # Claude Code sees the same bytes through a relative symlink per skill
    link = project / ".claude/skills" / FLAKY
    assert link.is_symlink() and os.readlink(link) == f"../../.agents/skills/{FLAKY}"
    assert (link / "SKILL.md").read_bytes() == FLAKY_MD.encode()
    assert (project / ".claude/skills" / REFUND / "SKILL.md").read_bytes() == \
        (agents / REFUND / "SKILL.md").read_bytes()
    # the project's own skills are untouched
    assert {k: v for k, v in (state(project / ".agents/skills/our-own")
                              | state(project / ".claude/skills")).items()
            if k in own} == own
    # the always-on block, the text around it kept
    text = (project / "AGENTS.md").read_bytes()
    assert text.startswith(HEAD + TAIL + b"\n\n" + START.encode())
    assert block_of(text) == block_of(skills.git("show", "main:AGENTS.md").encode())
    # the manifest: repository, commit, files and blob ids
    manifest = json.loads((agents / ".expgit-export.json").read_text())
    assert manifest["commit"] == skills.rev()
    assert set(manifest["skills"]) == {FLAKY, REFUND}
    assert manifest["skills"][FLAKY]["files"]["scripts/run.sh"] == {
        "blob": skills.git("rev-parse", f"main:skills/{FLAKY}/scripts/run.sh").strip(),
        "mode": "100755"}
    # every exported SKILL.md passes the reference validator, through both folders
    for folder in (agents / FLAKY, agents / REFUND, link):
        proc = subprocess.run([str(AGENTSKILLS), "validate", str(folder)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, (folder, proc.stdout, proc.stderr)


def test_exporting_twice_changes_nothing(skills: Driver, project: Path) -> None:
    export(skills, project)
    before = state(project)
    data = export(skills, project)
    assert actions(data) == {FLAKY: "unchanged", REFUND: "unchanged"}
    assert data["always_on"] == [{"path": "AGENTS.md", "action": "unchanged"}]
    assert state(project) == before  # same bytes, same mtimes: nothing rewritten


def test_a_deprecated_skill_is_removed_and_an_update_written(skills: Driver,
                                                             project: Path) -> None:
    d = skills
    export(d, project)
    deprecated = FLAKY_MD.replace("expgit-status: active", "expgit-status: deprecated")
    d.apply(d.merge(d.propose(FLAKY, deprecated), d.propose(REFUND, refund_with("New.\n"))))
    data = export(d, project)
    assert actions(data) == {FLAKY: "removed", REFUND: "updated"}
    assert not os.path.lexists(project / ".agents/skills" / FLAKY)
    assert not os.path.lexists(project / ".claude/skills" / FLAKY)
    assert (project / ".agents/skills/our-own/SKILL.md").read_bytes() == OWN
    assert b"New." in (project / ".claude/skills" / REFUND / "SKILL.md").read_bytes()
    assert b"New." in block_of((project / "AGENTS.md").read_bytes())
    manifest = json.loads((project / ".agents/skills/.expgit-export.json").read_text())
    assert set(manifest["skills"]) == {REFUND} and manifest["commit"] == d.rev()


def test_a_folder_expgit_did_not_write_is_a_clash(skills: Driver, project: Path) -> None:
    theirs = project / ".agents/skills" / FLAKY
    theirs.mkdir()
    (theirs / "SKILL.md").write_bytes(OWN)
    before = state(project)
    out = export(skills, project, code=3)
    assert f"{theirs}/SKILL.md (not written by expgit)" in out.err
    assert state(project) == before  # nothing written, not even the other skill


def test_a_claude_folder_of_the_same_name_is_a_clash(skills: Driver, project: Path) -> None:
    (project / ".claude/skills" / REFUND).mkdir()
    before = state(project)
    out = export(skills, project, code=3)
    assert f".claude/skills/{REFUND} (not written by expgit)" in out.err
    assert state(project) == before


def test_a_file_edited_since_the_export_is_a_clash(skills: Driver, project: Path) -> None:
    d = skills
    export(d, project)
    edited = project / ".agents/skills" / FLAKY / "references/guide.md"
    edited.write_bytes(b"my notes\n")
    d.apply(d.merge(d.propose(FLAKY, FLAKY_MD + "3. One more step.\n")))
    before = state(project)
    out = export(d, project, code=3)
    assert f"{edited} (changed since the export)" in out.err
    assert state(project) == before


def test_dry_run_writes_nothing(skills: Driver, project: Path) -> None:
    before = state(project)
    result = skills.ok("export", "--to", project, "--dry-run")
    assert f"added      {FLAKY}" in result.out and "updated    AGENTS.md" in result.out
    assert state(project) == before
    export(skills, project)
    skills.apply(skills.merge(skills.propose(REFUND, refund_with("Dry.\n"))))
    before = state(project)
    data = export(skills, project, "--dry-run")
    assert actions(data) == {FLAKY: "unchanged", REFUND: "updated"}
    assert state(project) == before


def test_export_to_the_home_folder(skills: Driver, tmp_path: Path) -> None:
    home = Path.home()  # the tests' own (conftest sets HOME)
    data = export(skills, Path("~"))
    assert Path(data["to"]) == home
    assert (home / ".agents/skills" / FLAKY / "SKILL.md").read_bytes() == FLAKY_MD.encode()
    assert (home / ".claude/skills" / FLAKY / "SKILL.md").read_bytes() == FLAKY_MD.encode()
    assert not (home / "AGENTS.md").exists()  # no agent reads ~/AGENTS.md
    assert data["always_on"] == [{"path": "AGENTS.md",
                                  "action": "skipped at the user level"}]


def test_a_shared_claude_folder_gets_no_links(skills: Driver, tmp_path: Path) -> None:
    root = tmp_path / "code"
    (root / ".agents/skills").mkdir(parents=True)
    (root / ".claude").mkdir()
    (root / ".claude/skills").symlink_to("../.agents/skills")
    data = export(skills, root)
    assert data["claude"] == "shared"
    assert (root / ".claude/skills" / FLAKY / "SKILL.md").read_bytes() == FLAKY_MD.encode()
    assert not (root / ".agents/skills" / FLAKY / FLAKY).exists()


def test_a_failure_midway_leaves_a_true_manifest(skills: Driver, project: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The third file write fails: the manifest names only what is there, and the next
    run finishes the export without a clash."""
    real = folder_files.write_file
    calls: list[Path] = []

    def failing(path: Path, data: bytes, mode: str) -> None:
        if path.name != skill_export.MANIFEST:
            calls.append(path)
            if len(calls) == 3:
                raise OSError("disk full")
        real(path, data, mode)

    monkeypatch.setattr(skill_export, "write_file", failing)
    repo = ExperienceRepository.open(skills.path)
    with pytest.raises(OSError):
        skill_export.export_skills(repo, project)
    manifest = json.loads((project / ".agents/skills/.expgit-export.json").read_text())
    listed = {f"{name}/{rel}" for name, skill in manifest["skills"].items()
              for rel in skill["files"]}
    there = {str(p.relative_to(project / ".agents/skills"))
             for p in (project / ".agents/skills").rglob("*")
             if p.is_file() and p.name != ".expgit-export.json"
             and "our-own" not in p.parts}
    assert listed == there and len(listed) == 2
    monkeypatch.setattr(skill_export, "write_file", real)
    data = export(skills, project)
    assert actions(data) == {FLAKY: "updated", REFUND: "added"}
    assert (project / ".claude/skills" / FLAKY / "scripts/run.sh").read_bytes() == SCRIPT


def test_a_flat_repository_is_refused(driver: Driver, project: Path) -> None:
    assert "flat layout" in driver.fails(2, "export", "--to", project).err


def test_copies_where_symlinks_are_refused(skills: Driver, project: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def no_symlinks(*args: Any, **kwargs: Any) -> None:
        raise OSError("symlinks are not supported here")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    export(skills, project)
    copy = project / ".claude/skills" / FLAKY
    assert copy.is_dir() and not copy.is_symlink()
    assert (copy / "SKILL.md").read_bytes() == FLAKY_MD.encode()
    assert (copy / "scripts/run.sh").stat().st_mode & stat.S_IXUSR
    manifest = json.loads((project / ".agents/skills/.expgit-export.json").read_text())
    assert manifest["skills"][FLAKY]["claude"] == "copy"
    before = state(project)
    monkeypatch.undo()  # symlinks work again: the copies stay copies, nothing rewritten
    assert actions(export(skills, project)) == {FLAKY: "unchanged", REFUND: "unchanged"}
    assert state(project) == before
    (copy / "references/guide.md").write_bytes(b"edited in the copy\n")
    assert "changed since the export" in export(skills, project, code=3).err
    (copy / "references/guide.md").write_bytes(GUIDE)
    deprecated = FLAKY_MD.replace("expgit-status: active", "expgit-status: deprecated")
    skills.apply(skills.merge(skills.propose(FLAKY, deprecated)))
    assert actions(export(skills, project))[FLAKY] == "removed"
    assert not os.path.lexists(copy)
