"""``expgit doctor``: what a crash or a forge left, shown without a change, and fixed.

It looks for:

* the expgit lock: free, held by a live writer, or stale (its process gone), and then
  what the dead writer left: its ref lock files, its update half installed, a working
  tree its move of ``main`` never reached (:mod:`expgit.store.crash`);
* ref lock files that no dead writer's record names: a running git holds them, or a
  crash of a process that took no expgit lock left them; never removed here;
* a repository git's automatic maintenance is overdue for (loose objects past
  ``gc.auto``, :mod:`expgit.git.maintenance`), and a maintenance that failed;
* refs in expgit's namespaces whose commits expgit did not make (an ordinary commit
  pushed to ``expgit/gradients/...``): every listing skips them; named here, never
  deleted (they are someone's work: ``git branch -D`` removes one after a look);
* refs kept in a namespace that disagrees with history: the branch of a proposal a
  forge merged, or refs a crash moved half-way. State is read from history anyway
  (:mod:`expgit.store.derived.applied`); settling only tidies where the commits are kept.

``fix`` takes the lock (which recovers a stale one, as every writer does) and settles
the refs in one transaction; then, outside the lock, it runs git's maintenance if due.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from expgit.git import maintenance
from expgit.git.repo import RefUpdate
from expgit.store.crash import Recovery, behind, pending_of
from expgit.store.derived.versions_refresh import refresh_checkpoint
from expgit.store.refnames import GRADIENT_STATES, PROPOSAL_STATES, Stray
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import settling_updates
from expgit.store.workflow.gradients import list_gradients
from expgit.store.workflow.proposals import list_proposals

ALL_STATES = ("open", "applied", "rejected")


@dataclass
class Diagnosis:
    lock: str  # free | held | stale
    holder: dict[str, object] | None = None
    dead_writer_locks: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # refs its update did not reach
    behind: list[str] = field(default_factory=list)  # branches a working tree lags
    foreign_locks: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)  # refs to move to their state
    strays: list[Stray] = field(default_factory=list)  # refs of commits expgit did not make
    recovered: Recovery | None = None  # what fix() cleared
    settled: list[str] = field(default_factory=list)  # what fix() moved
    maintenance: maintenance.Status | None = None  # git's automatic maintenance
    maintained: bool = False  # fix() ran git's maintenance
    maintenance_warning: str | None = None  # ... and it failed so

    @property
    def unmaintained(self) -> bool:
        """Loose objects past git's threshold: maintenance is overdue."""
        return self.maintenance is not None and self.maintenance.due

    @property
    def held_by_others(self) -> bool:
        return self.lock == "held" or bool(self.foreign_locks)

    @property
    def needs_fix(self) -> bool:
        return self.lock == "stale" or bool(self.unsettled) or self.unmaintained

    @property
    def healthy(self) -> bool:
        return not (self.held_by_others or self.needs_fix or self.strays)


def _lock_files(repo: ExperienceRepository) -> list[str]:
    """Every ref lock file there is: ``<ref>.lock`` under refs/, ``HEAD.lock``,
    ``packed-refs.lock``."""
    common = repo.git.common_dir
    found = [str(p) for p in (common / "packed-refs.lock", repo.git.git_dir / "HEAD.lock",
                              common / "HEAD.lock") if p.exists()]
    for folder, _, files in os.walk(common / "refs"):
        found += [os.path.join(folder, f) for f in files if f.endswith(".lock")]
    return sorted(set(found))


def unsettled_updates(repo: ExperienceRepository, strays: list[Stray] | None = None
                      ) -> list[RefUpdate]:
    """The moves that keep each proposal and gradient under its state as history
    decides it, one ref each; the refs expgit did not make are added to ``strays``."""
    items: list[tuple[dict[str, str], str, str]] = []
    for p in list_proposals(repo, ALL_STATES, strays=strays):
        items.append((PROPOSAL_STATES, p.commit, p.state))
    items += [(GRADIENT_STATES, g.commit, g.state)
              for g in list_gradients(repo, ALL_STATES, strays=strays)]
    updates: dict[str, RefUpdate] = {}
    for states, commit, state in items:
        for u in settling_updates(repo, [(states, commit)], state):
            updates.setdefault(u.ref, u)
    return list(updates.values())


def diagnose(repo: ExperienceRepository) -> Diagnosis:
    """What is there now; changes nothing."""
    lock = repo.lock("expgit doctor")
    holder = lock.holder()
    if holder is None:
        diagnosis = Diagnosis("free")
    elif not lock.is_stale(holder):
        diagnosis = Diagnosis("held", holder)
    else:
        present, installed, pending = pending_of(repo.git, holder)
        diagnosis = Diagnosis("stale", holder, present,
                              [u.ref for u in pending] if installed else [])
        diagnosis.behind = [u.ref.removeprefix("refs/heads/") for u in [*installed, *pending]
                            if u.new is not None and behind(repo.git, u.ref, u.new)]
    owned = set(diagnosis.dead_writer_locks)
    diagnosis.foreign_locks = [p for p in _lock_files(repo) if p not in owned]
    diagnosis.unsettled = [u.ref for u in unsettled_updates(repo, diagnosis.strays)]
    diagnosis.maintenance = maintenance.status(repo.git.maintenance.target)
    return diagnosis


def fix(repo: ExperienceRepository) -> Diagnosis:
    """Recover a stale lock and settle the refs; then diagnose again. A lock held by a
    live writer is waited for as any writer waits (LockHeldError after that)."""
    lock = repo.lock("expgit doctor --fix")
    with lock.held():
        updates = unsettled_updates(repo)
        if updates:
            repo.git.update_refs(updates, "expgit doctor: keep refs where history puts them")
        refresh_checkpoint(repo)  # the versions checkpoint a clone starts from, when due
    target = repo.git.maintenance.target
    due = maintenance.status(target).due  # run outside the lock, as after any command
    warning = maintenance.maintain(target, full=True) if due else None
    after = diagnose(repo)
    after.maintained, after.maintenance_warning = due and warning is None, warning
    after.recovered = lock.recovered
    after.settled = [u.ref for u in updates]
    return after


def describe_path(repo: ExperienceRepository, path: str) -> str:
    """A lock file's path relative to the git directory, as a user would look for it."""
    try:
        return str(Path(path).relative_to(repo.git.common_dir))
    except ValueError:
        return path
