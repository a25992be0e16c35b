"""Reviewing and rejecting gradients and proposals.

Rejecting moves the branch out of ``refs/heads`` into ``refs/expgit/rejected/`` and
records the reason as a git note (``refs/notes/expgit``) on the commit, all in one ref
transaction under the expgit lock: the branch disappears, the audit trail keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from expgit.errors import ConflictError, InvalidInputError, NotFoundError
from expgit.git.repo import GitRepo, RefUpdate
from expgit.store.refnames import GRADIENT_STATES, NOTES_REF
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import closing_updates, ensure_open, settling_updates
from expgit.store.workflow.gradients import Gradient, find_gradient
from expgit.store.workflow.proposals import Proposal, find_proposal, list_proposals


def find_any(repo: ExperienceRepository, item_id: str) -> Gradient | Proposal:
    """The proposal or gradient an id names (proposals first)."""
    wanted = item_id.strip().lower()
    if len(wanted) < 4 or any(c not in "0123456789abcdef" for c in wanted):
        raise InvalidInputError(
            f"{item_id!r} is not a proposal or gradient id (at least 4 hex digits)",
            hint="list them with `expgit proposals` and `expgit gradients`")
    try:
        return find_proposal(repo, item_id)
    except NotFoundError:
        pass
    try:
        return find_gradient(repo, item_id)
    except NotFoundError:
        raise NotFoundError(f"no proposal or gradient {item_id!r}",
                            hint="list them with `expgit proposals` and `expgit gradients`"
                            ) from None


def read_note(git: GitRepo, commit: str) -> str | None:
    tip = git.ref(NOTES_REF)
    if tip is None:
        return None
    tree = git.read_commit(tip).tree
    entry = git.path_entry(tree, commit) or git.path_entry(tree, f"{commit[:2]}/{commit[2:]}")
    return git.read_blob(entry.sha).decode("utf-8", "replace") if entry else None


def note_update(git: GitRepo, commit: str, text: str, subject: str) -> RefUpdate:
    """A new notes commit that adds ``text`` to the note on ``commit``, as a RefUpdate."""
    old_tip = git.ref(NOTES_REF)
    previous = read_note(git, commit)
    body = (previous.rstrip("\n") + "\n\n" if previous else "") + text.rstrip("\n") + "\n"
    tree = git.edit_tree(git.read_commit(old_tip).tree if old_tip else None,
                         {commit: git.write_blob(body.encode())})
    new_tip = git.write_commit(tree, [old_tip] if old_tip else [], subject + "\n")
    return RefUpdate(NOTES_REF, new_tip, old_tip)


@dataclass
class RejectResult:
    id: str
    kind: str
    commit: str
    reason: str
    gradients: list[str]


def reject(repo: ExperienceRepository, item_id: str, reason: str) -> RejectResult:
    reason = reason.strip()
    if not reason:
        raise InvalidInputError("give a --reason: it is kept in the audit trail")
    with repo.lock(f"expgit reject {item_id}").held():
        item = find_any(repo, item_id)
        if isinstance(item, Proposal):
            ensure_open(repo, item)
            updates = closing_updates(repo, item, "rejected")
            kind = "proposal"
            gradients = [u.ref.rsplit("/", 1)[1] for u in updates
                         if u.ref.startswith(GRADIENT_STATES["rejected"])]
        else:
            if item.state != "open":
                raise ConflictError(f"gradient {item.id} was already {item.state}")
            holders = [p.id for p in list_proposals(repo) if item.commit in p.gradient_commits]
            if holders:
                raise ConflictError(
                    f"gradient {item.id} is in open proposal {', '.join(holders)}",
                    hint="reject that proposal instead; its gradients are rejected with it")
            kind, gradients = "gradient", []
            updates = settling_updates(repo, [(GRADIENT_STATES, item.commit)], "rejected")
        who = repo.git.identity("COMMITTER").rsplit(" ", 2)[0]
        note = f"Rejected {kind} {item.id} by {who}\nReason: {reason}"
        updates.append(note_update(repo.git, item.commit, note, f"expgit reject {item.id}"))
        repo.git.update_refs(updates, f"expgit reject {item.id}")
        return RejectResult(item.id, kind, item.commit, reason, gradients)
