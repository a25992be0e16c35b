"""Branches under ``expgit/gradients/`` and ``expgit/proposals/`` that expgit did not make
(a plain ``git push`` of an ordinary commit to a shared bare repository): every listing
skips them and names them in one line, ``--json`` in a ``skipped`` field, and ``doctor``
lists each as a finding. Nothing is deleted: they are someone's work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, example_flat, git, repo_state

from expgit.init import init_repository


def _shared(run_cli: Any, tmp_path: Path) -> tuple[Path, str, str, list[str]]:
    """A bare repository with one real gradient and one real proposal (of another
    gradient), and three stray branches pushed from a clone: ``(bare, gradient id,
    proposal id, stray branch names)``."""
    bare = tmp_path / "server.git"
    init_repository(bare, bare=True, seed=EXAMPLE, layout="flat")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ids = []
    for name in ("refund-method-rules", "flight-change-rules"):
        text = example_flat(name)
        content = scratch / f"{name}.md"
        content.write_text(f"{text}\n- one more rule for {name}\n")
        made = run_cli("-C", bare, "propose", name, "--rationale", "it helps",
                       "--content-file", content)
        assert made.code == 0, made.err
        ids.append(made.out.strip())
    merged = run_cli("-C", bare, "merge", ids[1])
    assert merged.code == 0, merged.err
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(bare), str(clone))
    (clone / "notes.txt").write_text("an ordinary commit\n")
    git(clone, "add", "notes.txt")
    git(clone, "commit", "-qm", "an ordinary commit")
    own_id = git(clone, "rev-parse", "HEAD").strip()[:12]
    strays = ["expgit/gradients/foo", f"expgit/gradients/{own_id}", "expgit/proposals/bar"]
    for branch in strays:
        git(clone, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
    return bare, ids[0], merged.out.strip(), strays


def _named(text: str, strays: list[str]) -> None:
    lines = [line for line in text.splitlines() if "expgit did not make" in line]
    assert len(lines) == 1, text
    for branch in strays:
        assert branch in lines[0], lines[0]


@pytest.mark.slow
def test_listings_skip_a_stray_branch_and_name_it(run_cli: Any, tmp_path: Path) -> None:
    bare, gid, pid, strays = _shared(run_cli, tmp_path)
    gradient_strays = [s for s in strays if "/gradients/" in s]
    own_id = strays[1].rsplit("/", 1)[1]
    before = repo_state(bare)

    listed = run_cli("-C", bare, "gradients")
    assert listed.code == 0, listed.err
    assert gid in listed.out and not any(s.rsplit("/", 1)[1] in listed.out for s in strays)
    _named(listed.err, gradient_strays)
    assert f"expgit/gradients/{own_id} (no expgit trailers)" in listed.err
    data = json.loads(run_cli("-C", bare, "gradients", "--json").out)
    assert [g["id"] for g in data["gradients"]] == [gid]
    assert {s["ref"] for s in data["skipped"]} == set(gradient_strays)

    listed = run_cli("-C", bare, "proposals")
    assert listed.code == 0, listed.err
    assert pid in listed.out and "ordinary commit" not in listed.out
    _named(listed.err, ["expgit/proposals/bar"])
    data = json.loads(run_cli("-C", bare, "proposals", "--json").out)
    assert [p["id"] for p in data["proposals"]] == [pid]
    assert [s["ref"] for s in data["skipped"]] == ["expgit/proposals/bar"]

    shown = run_cli("-C", bare, "status")
    assert shown.code == 0, shown.err
    assert f"  {pid}" in shown.out and f"  {gid}" in shown.out
    _named(shown.err, strays)
    data = json.loads(run_cli("-C", bare, "status", "--json").out)
    assert {s["ref"] for s in data["skipped"]} == set(strays)
    assert repo_state(bare) == before  # listing reads only

    doctor = run_cli("-C", bare, "doctor")
    assert doctor.code == 0, doctor.out + doctor.err
    for branch in strays:
        assert f"stray: {branch} " in doctor.out
    data = json.loads(run_cli("-C", bare, "doctor", "--json").out)
    assert data["healthy"] is False
    assert {s["ref"] for s in data["strays"]} == set(strays)
    assert repo_state(bare) == before  # named, never deleted

    merged = run_cli("-C", bare, "merge", "--all")
    assert merged.code == 0, merged.err
    _named(merged.err, gradient_strays)
    proposal = merged.out.strip()
    assert git(bare, "log", "-1", "--format=%B", f"expgit/proposals/{proposal}").count(
        "Expgit-Gradient: ") == 1
    for branch in strays:  # still there
        git(bare, "rev-parse", "--verify", f"refs/heads/{branch}")


@pytest.mark.slow
def test_a_stray_branch_is_refused_by_id(run_cli: Any, tmp_path: Path) -> None:
    bare, _, _, strays = _shared(run_cli, tmp_path)
    own_id = strays[1].rsplit("/", 1)[1]
    shown = run_cli("-C", bare, "review", own_id)
    assert shown.code == 5, shown.out + shown.err
    assert "not an expgit gradient (no expgit trailers)" in shown.err
