"""The files a run reads or writes besides its report: recorded rollouts (``.jsonl``) and
the PR description of its proposals (``--pr-body``)."""

from __future__ import annotations

from pathlib import Path

from expgit.core.domain import Rollout
from expgit.core.jsonl import load_jsonl
from expgit.errors import InvalidInputError
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import find_proposal


def load_rollouts(path: Path) -> list[Rollout]:
    """Recorded rollouts, one Rollout JSON object per line (each with its case)."""
    rollouts = load_jsonl(path, Rollout, "rollouts")
    if not rollouts:
        raise InvalidInputError(f"{path}: contains no rollouts")
    return rollouts


def write_pr_body(repo: ExperienceRepository, proposal_ids: list[str], path: Path) -> None:
    """The PR description of the run's proposals (title line, blank line, body); several
    proposals are written one after the other, separated by a ``---`` line."""
    bodies = []
    for pid in proposal_ids:
        proposal = find_proposal(repo, pid)
        bodies.append(f"{proposal.subject}\n\n{proposal.description.rstrip()}\n")
    try:
        path.write_text("\n---\n\n".join(bodies))
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot write the PR body: {exc.strerror}") from None
