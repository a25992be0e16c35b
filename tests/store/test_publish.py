"""The shortcuts of ``apply``: whole ids looked up by ref name, and no ``git worktree
list`` when the repository has no linked worktree."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import edited, git

from expgit.errors import InvalidInputError, NotFoundError
from expgit.git.repo import GitRepo
from expgit.store.refnames import PROPOSAL_STATES, find_by_id
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import apply_proposal
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import find_proposal, merge

NAME = "refund-method-rules"


def a_proposal(repo: ExperienceRepository) -> tuple[str, str]:
    text = edited(NAME, "\nA new note.\n", repo)
    gradient = propose(repo, GradientRequest(name=NAME, content=text, rationale="helps"))
    return merge(repo, [gradient.id]).id, text


def record_git(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every git command GitRepo starts from now on."""
    calls: list[tuple[str, ...]] = []
    run = GitRepo.run

    def recorded(self: GitRepo, *args: str, **kwargs: object) -> object:
        calls.append(args)
        return run(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GitRepo, "run", recorded)
    return calls


def test_a_whole_id_is_found_without_listing_refs(
        seeded_repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    pid, _ = a_proposal(seeded_repo)
    commit = git(seeded_repo.git.work_tree or seeded_repo.git.git_dir, "rev-parse",
                 PROPOSAL_STATES["open"] + pid).strip()
    listings: list[str] = []
    refs = GitRepo.refs
    def noted_refs(self: GitRepo, prefix: str) -> dict[str, str]:
        listings.append(prefix)
        return refs(self, prefix)

    monkeypatch.setattr(GitRepo, "refs", noted_refs)

    assert find_by_id(seeded_repo, PROPOSAL_STATES, pid, "proposal", "") == ("open", commit)
    assert find_by_id(seeded_repo, PROPOSAL_STATES, commit, "proposal", "") == ("open", commit)
    assert listings == []
    assert find_by_id(seeded_repo, PROPOSAL_STATES, pid[:6], "proposal", "") == (
        "open", commit)
    assert listings == list(PROPOSAL_STATES.values())
    with pytest.raises(NotFoundError):
        find_by_id(seeded_repo, PROPOSAL_STATES, "0" * 12, "proposal", "")


def test_a_whole_id_in_two_states_on_different_commits_is_ambiguous(
        seeded_repo: ExperienceRepository) -> None:
    pid, _ = a_proposal(seeded_repo)
    path = seeded_repo.git.work_tree
    assert path is not None
    git(path, "update-ref", PROPOSAL_STATES["rejected"] + pid, "main")
    with pytest.raises(InvalidInputError, match="ambiguous"):
        find_proposal(seeded_repo, pid)


@pytest.mark.parametrize("checked_out", [True, False], ids=["on-main", "on-another-branch"])
def test_apply_without_linked_worktrees_lists_none(
        seeded_repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch,
        checked_out: bool) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    if not checked_out:
        git(path, "switch", "-q", "-c", "elsewhere")
    pid, text = a_proposal(seeded_repo)
    before = (path / "experiences" / f"{NAME}.md").read_text()
    calls = record_git(monkeypatch)

    result = apply_proposal(seeded_repo, pid)

    assert not any("worktree" in args for args in calls), calls
    assert result.warnings == []
    assert git(path, "show", f"main:experiences/{NAME}.md") == text
    on_disk = (path / "experiences" / f"{NAME}.md").read_text()
    assert on_disk == (text if checked_out else before)
    assert git(path, "status", "--porcelain") == ""


def test_apply_with_a_linked_worktree_updates_it(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    git(path, "switch", "-q", "-c", "elsewhere")
    git(path, "worktree", "add", "-q", str(tmp_path / "linked"), "main")
    pid, text = a_proposal(seeded_repo)

    assert apply_proposal(seeded_repo, pid).warnings == []

    assert (tmp_path / "linked" / "experiences" / f"{NAME}.md").read_text() == text
    assert git(tmp_path / "linked", "status", "--porcelain") == ""
    assert git(path, "status", "--porcelain") == ""
