"""A proposal merged as a pull request on a forge, each of the four ways a forge merges:
fast-forward, merge commit, squash, rebase. Its state, ``log`` and ``revert`` come from
``main``'s history, whichever way it got there."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLE, fsck, git, run_expgit

from expgit.init import init_repository
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import GradientRequest, list_gradients, propose
from expgit.store.workflow.history import policy_log
from expgit.store.workflow.proposals import find_proposal, list_proposals, merge

NAME = "refund-method-rules"


def _forge(tmp_path: Path) -> tuple[Path, Path]:
    """A bare "forge" repository seeded by ``expgit init --bare``, and a clone of it."""
    forge = tmp_path / "forge.git"
    init_repository(forge, bare=True, seed=EXAMPLE, layout="flat")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(forge), str(clone))
    return forge, clone


def _proposal(clone: Path, text: str) -> str:
    repo = ExperienceRepository.open(clone)
    entry = repo.snapshot().get(NAME)
    assert entry is not None
    propose(repo, GradientRequest(name=NAME, content=entry.text + text,
                                  rationale="Gift-card refunds were promised in 5 days",
                                  evidence=["trajectory/3f2a"], confidence=0.8))
    return merge(repo).id


def _merge_on_forge(tmp_path: Path, forge: Path, branch: str, style: str, body: str) -> None:
    """What the forge's merge button does, in a working clone of the forge, then pushed."""
    work = tmp_path / f"forge-work-{style}"
    git(tmp_path, "clone", "-q", str(forge), str(work))
    git(work, "fetch", "-q", "origin", f"{branch}:{branch}")
    if style == "rebase":  # main moved meanwhile: the forge replays the commit on top
        (work / "NOTES.md").write_text("release notes\n")
        git(work, "add", "NOTES.md")
        git(work, "commit", "-q", "-m", "docs: release notes")
    if style == "fast-forward":
        git(work, "merge", "-q", "--ff-only", branch)
    elif style == "merge-commit":
        git(work, "merge", "-q", "--no-ff", "-m", f"Merge pull request #1 from {branch}", branch)
    elif style.startswith("squash"):
        git(work, "merge", "-q", "--squash", branch)
        # a forge may add a paragraph of its own after the PR body's trailers
        tail = "\n\nCo-authored-by: Reviewer <r@example.com>\n" if style != "squash" else ""
        git(work, "commit", "-q", "-F", "-",
            input=f"Update refund rules (#1)\n\n{body}{tail}")
    else:
        git(work, "cherry-pick", branch)
    git(work, "push", "-q", "origin", "main")


def _pr_body(repo: ExperienceRepository, pid: str) -> str:
    """The PR body ``expgit pr`` writes: the description, then the proposal's trailers."""
    proposal = find_proposal(repo, pid)
    trailers = [(tr.PROPOSAL, proposal.id), *((tr.GRADIENT, g) for g in proposal.gradient_commits)]
    return tr.Message("", proposal.description, tuple(trailers)).render().lstrip("\n")


@pytest.mark.parametrize("style", ["fast-forward", "merge-commit", "squash",
                                   "squash-co-authored", "rebase"])
@pytest.mark.slow
def test_a_pull_request_merged_on_the_forge_is_applied(tmp_path: Path, style: str) -> None:
    forge, clone = _forge(tmp_path)
    pid = _proposal(clone, "\n- Gift cards: refunds arrive within 24 hours.\n")
    repo = ExperienceRepository.open(clone)
    branch = f"expgit/proposals/{pid}"
    git(clone, "push", "-q", "origin", branch)
    _merge_on_forge(tmp_path, forge, branch, style, _pr_body(repo, pid))
    git(clone, "pull", "-q", "--ff-only", "origin", "main")

    repo = ExperienceRepository.open(clone)
    assert [p.id for p in list_proposals(repo)] == []
    applied = {p.id: p for p in list_proposals(repo, ("applied",))}
    assert pid in applied, f"{style}: not applied"
    main = repo.main_commit()
    assert applied[pid].applied_in in (git(clone, "rev-list", main).split())
    assert list_gradients(repo) == []
    assert [g.state for g in list_gradients(repo, ("applied",))] == ["applied"]

    # apply says what happened instead of a base-content conflict
    again = run_expgit("apply", pid, cwd=clone)
    assert again.returncode == 3, again.stderr
    assert f"proposal {pid} was already applied" in again.stderr
    assert "conflicts with" not in again.stderr

    # log: the update is the proposal, with its rationale, gradients and evidence
    update = next(u for u in policy_log(repo, NAME) if u.kind != "init")
    assert (update.kind, update.proposal) == ("proposal", pid), style
    assert "Gift-card refunds were promised in 5 days" in update.description
    assert [g.evidence for g in update.gradients] == [["trajectory/3f2a"]]
    assert update.gradients[0].confidence == pytest.approx(0.8)
    shown = run_expgit("log", NAME, cwd=clone)
    assert shown.returncode == 0 and pid in shown.stdout and "manual" not in shown.stdout

    # revert the commit the forge made: the experience is as before the PR
    before = git(clone, "show", f"{main}~1:experiences/{NAME}.md") if style != "merge-commit" \
        else git(clone, "show", f"{main}^1:experiences/{NAME}.md")
    reverted = run_expgit("revert", main, cwd=clone)
    assert reverted.returncode == 0, reverted.stderr
    assert (clone / "experiences" / f"{NAME}.md").read_text() == before
    assert git(clone, "status", "--porcelain") == ""
    fsck(clone)


def test_the_state_follows_main_and_no_ref_can_disagree(tmp_path: Path) -> None:
    """A proposal whose ref says "applied" while main lacks it is open; one whose branch
    is still open while main has it is applied."""
    _, clone = _forge(tmp_path)
    pid = _proposal(clone, "\n- Gift cards: 24 hours.\n")
    repo = ExperienceRepository.open(clone)
    proposal = find_proposal(repo, pid)
    # the refs as a crash between the namespaces could leave them: moved, main not
    git(clone, "update-ref", f"refs/expgit/applied/proposals/{pid}", proposal.commit)
    git(clone, "update-ref", "-d", f"refs/heads/expgit/proposals/{pid}")
    assert [p.id for p in list_proposals(ExperienceRepository.open(clone))] == [pid]
    applied = run_expgit("apply", pid, cwd=clone)
    assert applied.returncode == 0, applied.stderr
    repo = ExperienceRepository.open(clone)
    assert repo.main_commit() == proposal.commit
    assert [p.id for p in list_proposals(repo, ("applied",))] == [pid]
    assert git(clone, "for-each-ref", "--format=%(refname)", "refs/expgit/applied/proposals",
               "refs/heads/expgit/proposals").split() == [f"refs/expgit/applied/proposals/{pid}"]
