"""Applying a proposal to ``main`` under the expgit lock, with the base-content guard.

* ``main`` still at the proposal's base: fast-forward to the proposal commit.
* ``main`` has moved: for every experience the proposal touches, the blob on current
  ``main`` must equal the blob on the base. If all match, the proposal is rebuilt on top
  of current ``main`` (linear history, ``Expgit-Rebased-From`` trailer); otherwise it is
  refused, naming each conflicting experience, and nothing is written.
* ``main`` is moved by compare-and-swap. The lock keeps other expgit writers out, but a
  plain ``git commit`` or ``git push`` to ``main`` can still win the race: then the guard
  runs again on the new ``main`` (up to ``ATTEMPTS`` times).
* ``remote``: the same against the remote's ``main``, pushed with
  ``--force-with-lease=main:<old>``; when the lease fails, fetch and run the guard again.
  A push reported as failed whose commit is on the remote's ``main`` after all (a lost
  connection) is a success. Afterwards the local ``main`` follows if it can
  fast-forward; the proposal is closed locally either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from expgit.errors import ConflictError, ExpgitError, UsageError
from expgit.git.operands import END_OF_OPTIONS, operand
from expgit.git.repo import RefMovedError, RefUpdate
from expgit.store.cas import TipMoved, compare_and_swap
from expgit.store.derived.versions_refresh import refresh_checkpoint
from expgit.store.format import trailers as tr
from expgit.store.format.always_on import experience_tree
from expgit.store.refnames import GRADIENT_STATES, ID_LEN, PROPOSAL_STATES
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.changes import path_blobs
from expgit.store.workflow.proposals import Proposal, find_proposal
from expgit.store.workflow.publish import publish

ATTEMPTS = 5  # moves of the local main by plain git that one apply rides out
# Pushes to a remote main that one apply rides out. Each refused lease means another
# writer's push landed, so this bounds how many writers may race one apply.
REMOTE_ATTEMPTS = 20


@dataclass
class ApplyResult:
    proposal: str
    commit: str
    previous: str | None
    rebased: bool
    remote: str | None = None
    attempts: int = 1
    warnings: list[str] = field(default_factory=list)


def settling_updates(repo: ExperienceRepository, items: Sequence[tuple[dict[str, str], str]],
                     state: str) -> list[RefUpdate]:
    """Keep each of ``items`` (``(namespaces, commit)``: a proposal or gradient) under
    ``state`` alone: its ref there made, its refs in the other namespaces removed. The
    refs are read, not assumed, so a transaction a crash cut short settles too."""
    names = [states[where] + sha[:ID_LEN] for states, sha in items for where in states]
    current = repo.git.refs_named(names)
    updates: list[RefUpdate] = []
    for states, sha in items:
        kept = {where: current.get(prefix + sha[:ID_LEN]) for where, prefix in states.items()}
        if sha not in kept.values():
            continue  # not one of ours (never opened here, or pruned)
        for where, prefix in states.items():
            if where == state and kept[where] is None:
                updates.append(RefUpdate(prefix + sha[:ID_LEN], sha, None))
            elif where != state and kept[where] == sha:
                updates.append(RefUpdate(prefix + sha[:ID_LEN], None, sha))
    return updates


def closing_updates(repo: ExperienceRepository, proposal: Proposal, state: str
                    ) -> list[RefUpdate]:
    """Move a proposal and its gradients to ``state``: ``applied`` or ``rejected``."""
    return settling_updates(repo, [(PROPOSAL_STATES, proposal.commit),
                                   *((GRADIENT_STATES, g) for g in proposal.gradient_commits)],
                            state)


def ensure_open(repo: ExperienceRepository, proposal: Proposal) -> None:
    if proposal.state == "applied" and proposal.applied_in is not None:
        raise ConflictError(
            f"proposal {proposal.id} was already applied: {repo.settings.main_branch} has "
            f"it in {proposal.applied_in[:ID_LEN]}",
            hint="see `expgit log` for what main holds now")
    if proposal.state != "open":
        raise ConflictError(f"proposal {proposal.id} was already {proposal.state}",
                            hint="see `expgit log` for what main holds now")


def build_on(repo: ExperienceRepository, proposal: Proposal, onto: str) -> tuple[str, bool]:
    """The commit that applies ``proposal`` on top of ``onto``: (commit, rebased)."""
    if proposal.base == onto:
        return proposal.commit, False
    current = path_blobs(repo.git, onto, (p for c in proposal.changes for p in c.before))
    conflicts = list(dict.fromkeys(c.name for c in proposal.changes
                                   for p, blob in c.before.items() if current.get(p) != blob))
    if conflicts:
        raise ConflictError(
            f"proposal {proposal.id} conflicts with {repo.settings.main_branch}: "
            + ", ".join(conflicts) + " changed since the proposal was made",
            conflicts=conflicts,
            hint="reject it and merge fresh gradients, or re-estimate against current main")
    info = repo.git.read_commit(proposal.commit)
    tree = experience_tree(repo, repo.git.read_commit(onto).tree,
                           {p: b for c in proposal.changes for p, b in c.after.items()})
    message = tr.parse_message(info.message).with_trailers((tr.REBASED_FROM, proposal.commit))
    return repo.git.write_commit(tree, [onto], message.render(), author=info.author_line), True


def apply_proposal(repo: ExperienceRepository, proposal_id: str, *,
                   remote: str | None = None) -> ApplyResult:
    if remote is not None:
        operand(remote, "--remote")  # before the lock: nothing is touched
    with repo.lock(f"expgit apply {proposal_id}").held():
        return apply_proposal_locked(repo, proposal_id, remote)


def apply_proposal_locked(repo: ExperienceRepository, proposal_id: str,
                          remote: str | None = None) -> ApplyResult:
    """:func:`apply_proposal` for a caller that already holds the repository lock
    (the training engine: lock -> reload -> plan -> apply -> release); with ``remote``,
    to the remote's ``main`` by lease and retry."""
    proposal = find_proposal(repo, proposal_id)
    ensure_open(repo, proposal)
    if remote is not None:
        return _apply_remote(repo, proposal, remote)
    return _apply_local(repo, proposal)


def _apply_local(repo: ExperienceRepository, proposal: Proposal) -> ApplyResult:
    """CAS ``main`` to the proposal built on it. The lock keeps expgit writers out, but
    not a plain ``git commit``/``git push`` to ``main``: if one moved it under us, guard
    and rebuild on the new ``main`` and try again."""
    def move(old: str, built: tuple[str, bool]) -> ApplyResult:
        new, rebased = built
        warnings = publish(repo, new, old, closing_updates(repo, proposal, "applied"),
                           f"expgit apply {proposal.id}")
        return ApplyResult(proposal.id, new, old, rebased, warnings=warnings)

    # a RefMovedError with main where it was: another ref moved, which no retry mends
    done = compare_and_swap(repo.main_commit, lambda old: build_on(repo, proposal, old), move,
                            attempts=ATTEMPTS,
                            retry=lambda old: repo.git.ref(repo.main_ref) != old)
    refresh_checkpoint(repo, done.result.commit)  # cheap unless EVERY commits since the last
    return replace(done.result, attempts=done.attempts)


def _fetch_main(repo: ExperienceRepository, remote: str) -> str:
    branch = repo.settings.main_branch
    tracking = f"refs/remotes/{remote}/{branch}"
    proc = repo.git.run("fetch", "--quiet", END_OF_OPTIONS, operand(remote, "--remote"),
                        f"+{repo.main_ref}:{tracking}", check=False)
    if proc.returncode != 0:
        raise UsageError(f"cannot fetch {branch} from remote {remote!r}: "
                         + proc.stderr.decode(errors="replace").strip())
    sha = repo.git.ref(tracking)
    assert sha is not None
    return sha


def _apply_remote(repo: ExperienceRepository, proposal: Proposal, remote: str
                  ) -> ApplyResult:
    branch = repo.settings.main_branch

    def lease(remote_old: str, built: tuple[str, bool]) -> tuple[str, str, bool]:
        new, rebased = built
        push = repo.git.run("push", "--porcelain",
                            f"--force-with-lease={repo.main_ref}:{remote_old}",
                            END_OF_OPTIONS, remote, f"{new}:{repo.main_ref}", check=False)
        if push.returncode == 0:
            return remote_old, new, rebased
        moved = _fetch_main(repo, remote)
        if moved == new or repo.git.is_ancestor(new, moved):
            return remote_old, new, rebased  # it landed although git reported a failure
        if moved == remote_old:
            raise ExpgitError(
                f"push to {remote!r} was refused: "
                + (push.stdout + push.stderr).decode(errors="replace").strip().replace("\n", " "),
                hint=f"nothing was changed, here or on {remote!r}")
        raise TipMoved(moved)  # the lease failed: someone else pushed; guard again

    done = compare_and_swap(
        lambda: _fetch_main(repo, remote), lambda old: build_on(repo, proposal, old), lease,
        attempts=REMOTE_ATTEMPTS, jitter=0.05,  # spread out colliding writers
        gave_up=lambda n: ConflictError(
            f"{branch} on {remote!r} kept moving: gave up after {n} attempts",
            hint="nothing was changed; run the command again"))
    (remote_old, new, rebased), attempt = done.result, done.attempts
    updates = closing_updates(repo, proposal, "applied")
    message = f"expgit apply {proposal.id}"
    warnings: list[str] = []
    local_old = repo.git.ref(repo.main_ref)
    try:
        if local_old is None or repo.git.is_ancestor(local_old, new):
            warnings = publish(repo, new, local_old, updates, message)
        else:
            repo.git.update_refs(updates, message)
            warnings.append(f"local {branch} has diverged from {remote}/{branch}; it was "
                            f"not moved (the proposal is applied on {remote})")
    except RefMovedError:
        # the remote has it already: close the proposal here even if local main moved
        repo.git.update_refs(updates, message)
        warnings.append(f"local {branch} moved while applying; it was not moved to "
                        f"{new[:12]} (the proposal is applied on {remote}): "
                        f"git merge --ff-only {remote}/{branch}")
    return ApplyResult(proposal.id, new, remote_old, rebased, remote, attempt, warnings)
