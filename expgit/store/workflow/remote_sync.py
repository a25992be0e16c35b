"""Pushing expgit's own refs to a shared remote, never by a forced push.

Several trainers on different machines share one bare repository. Two kinds of refs
travel:

* refs with a unique name (a gradient or proposal, named by its commit id): a plain push
  (:func:`push_refs`), all of them or none (``--atomic``); a ref the remote already holds
  at that commit is up to date.
* side branches (trajectories, sessions, outcomes: :mod:`expgit.store.sidebranch`), which
  every trainer appends to (:func:`push_side_branch`). The remote's tip is fetched into
  ``refs/remotes/<remote>/<branch>``. If the local tip already contains it, the local tip
  is pushed with ``--force-with-lease=<ref>:<remote tip>``. Otherwise another trainer
  pushed first, and the local entries are replayed on the remote's tip: a merge commit
  whose first parent is the remote's tip and whose second is the local tip, so both
  histories stay reachable, the push is a fast-forward on the remote, and the local
  branch (moved to it by compare-and-swap) fast-forwards too. Its tree is a three-way
  union per file (the base is the two tips' merge base): entries only one side added or
  changed are kept. The files are content-addressed, so an entry both sides wrote is
  the same file and kept once. A file both changed differently is a conflict: nothing
  is pushed (ConflictError), unless the branch is ``first_wins`` (records whose first
  version stands, as trajectories and outcomes are written): the remote's file is kept,
  the local one stays in the history, and the path is reported.

* the versions checkpoint (:mod:`expgit.store.derived.version_checkpoint`), a cache every writer
  extends (:func:`push_checkpoint`): a plain push, so the remote takes it only as a
  fast-forward; a remote checkpoint that went another way is left as it is (the next
  writer builds on it), never overwritten.

A refused lease (someone else pushed meanwhile) fetches again and retries, with jitter,
up to :data:`ATTEMPTS` times. A failed push leaves every local ref as it was, except a
side branch moved to its replay commit, which still holds every local entry: the next
push sends it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from expgit.errors import ConflictError, ExpgitError, UsageError
from expgit.git.operands import END_OF_OPTIONS, operand
from expgit.git.repo import GitRepo, RefMovedError, RefUpdate
from expgit.store.cas import compare_and_swap
from expgit.store.derived import version_checkpoint
from expgit.store.repository import ExperienceRepository

# Refused leases one push rides out: each means another trainer's push landed.
ATTEMPTS = 20
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")

PushStatus = Literal["absent", "up to date", "pushed", "replayed", "diverged"]


@dataclass
class SidePush:
    """What :func:`push_side_branch` did: ``absent`` (no such branch here), ``up to
    date`` (the remote holds it all), ``pushed`` (a fast-forward of the remote), or
    ``replayed`` (the local entries replayed on the remote's tip, then pushed); and
    :func:`push_checkpoint`: ``diverged`` (the remote's went another way: left as is)."""

    branch: str
    status: PushStatus
    commit: str | None = None
    attempts: int = 1
    kept_remote: list[str] = field(default_factory=list)  # first_wins: theirs was kept


def check_remote(repo: ExperienceRepository, remote: str) -> None:
    """UsageError unless ``remote`` is a remote configured in this repository."""
    operand(remote, "--remote")
    known = bool(_REMOTE_NAME.fullmatch(remote)) and repo.git.run(
        "config", "--get", f"remote.{remote}.url", check=False).returncode == 0
    if not known:
        raise UsageError(f"unknown remote {remote!r}: this repository has no such remote",
                         hint="see `git remote -v` for its remotes")


def _one_line(proc_out: bytes, proc_err: bytes) -> str:
    return " ".join((proc_out + proc_err).decode(errors="replace").split())


def fetch_tip(repo: ExperienceRepository, remote: str, ref: str) -> str | None:
    """The remote's ``ref``, fetched into its tracking ref; None if the remote has no
    such ref."""
    tracking = tracking_ref(remote, ref)
    proc = repo.git.run("fetch", "--quiet", "--no-tags", END_OF_OPTIONS,
                        operand(remote, "--remote"), f"+{ref}:{tracking}", check=False)
    if proc.returncode != 0:
        probe = repo.git.run("ls-remote", "--exit-code", END_OF_OPTIONS, remote, ref,
                             check=False)
        if probe.returncode != 2:  # 2: the remote answered and has no such ref
            raise ExpgitError(f"cannot fetch {ref} from remote {remote!r}: "
                              + _one_line(proc.stdout, proc.stderr),
                              hint="check the remote (git remote -v) and the network")
        return None
    return repo.git.ref(tracking)


def tracking_ref(remote: str, ref: str) -> str:
    return f"refs/remotes/{remote}/{ref.removeprefix('refs/heads/')}"


def push_refs(repo: ExperienceRepository, refs: Mapping[str, str], remote: str) -> list[str]:
    """Push each ``{ref: commit}`` (new names, or fast-forwards) to ``remote`` in one
    atomic push, never forced; the refs the remote did not hold yet."""
    if not refs:
        return []
    proc = repo.git.run("push", "--porcelain", "--atomic", END_OF_OPTIONS,
                        operand(remote, "--remote"),
                        *(f"{sha}:{ref}" for ref, sha in sorted(refs.items())), check=False)
    if proc.returncode != 0:
        raise ExpgitError(f"push to {remote!r} failed: {_one_line(proc.stdout, proc.stderr)}",
                          hint="nothing was pushed; everything is kept here, and the "
                          "next push sends it")
    moved = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        flag, _, rest = line.partition("\t")
        if flag in (" ", "*") and ":" in rest:
            moved.append(rest.split("\t", 1)[0].partition(":")[2])
    return moved


def _files(git: GitRepo, tree: str | None, prefix: str = "") -> dict[str, str]:
    """``{path: blob}`` of every file below ``tree``."""
    found: dict[str, str] = {}
    for entry in git.read_tree(tree) if tree else []:
        path = prefix + entry.name
        if entry.is_tree:
            found.update(_files(git, entry.sha, path + "/"))
        else:
            found[path] = entry.sha
    return found


def _tree_of(git: GitRepo, commit: str | None) -> str | None:
    return git.read_commit(commit).tree if commit else None


def _merge_base(git: GitRepo, one: str, other: str) -> str | None:
    proc = git.run("merge-base", one, other, check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def union_tree(git: GitRepo, local: str, theirs: str, *, first_wins: bool = False
               ) -> tuple[str, list[str]]:
    """The tree of ``theirs`` with the files ``local`` added, changed or removed since
    their merge base: (tree, the paths where ``theirs`` was kept over a different local
    file). ConflictError for such paths unless ``first_wins``."""
    base = _files(git, _tree_of(git, _merge_base(git, local, theirs)))
    mine = _files(git, _tree_of(git, local))
    remote_tree = _tree_of(git, theirs)
    remote = _files(git, remote_tree)
    changes: dict[str, str | None] = {}
    clashes: list[str] = []
    for path in sorted(set(base) | set(mine)):
        was, now = base.get(path), mine.get(path)
        if was == now or remote.get(path) == now:
            continue  # not changed here, or the remote has it as it is here
        if remote.get(path) == was:
            changes[path] = now  # changed only here
        else:
            clashes.append(path)
    if clashes and not first_wins:
        raise ConflictError(
            f"{len(clashes)} files differ here and on the remote: " + ", ".join(clashes[:5])
            + (" ..." if len(clashes) > 5 else ""), conflicts=clashes,
            hint="nothing was pushed; compare them with git diff and keep one")
    return git.edit_tree(remote_tree, changes), clashes


def _replay(repo: ExperienceRepository, ref: str, local: str, theirs: str, remote: str,
            first_wins: bool) -> tuple[str, list[str]]:
    """The merge commit of ``local`` replayed on ``theirs``; the local branch is moved to
    it by compare-and-swap (RefMovedError: a local writer moved it meanwhile)."""
    git = repo.git
    tree, kept = union_tree(git, local, theirs, first_wins=first_wins)
    branch = ref.removeprefix("refs/heads/")
    subject = f"expgit: replay {branch} onto {remote}/{branch}"
    commit = git.write_commit(tree, [theirs, local], subject)
    git.update_refs([RefUpdate(ref, commit, local)], subject)
    return commit, kept


def push_side_branch(repo: ExperienceRepository, branch: str, remote: str, *,
                     first_wins: bool = False) -> SidePush:
    """Bring the remote's ``branch`` up to the local one (see the module's docstring)."""
    ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
    name = ref.removeprefix("refs/heads/")
    if ref == repo.main_ref:
        raise UsageError(f"{name} is the main branch, not a side branch")
    git = repo.git
    kept: list[str] = []  # first_wins: the paths where theirs was kept, every replay

    def read() -> tuple[str | None, str | None]:
        local = git.ref(ref)
        return local, (fetch_tip(repo, remote, ref) if local is not None else None)

    def replay(tip: tuple[str | None, str | None]) -> tuple[str, bool] | None:
        """The commit to push and whether it is a replay; None: nothing to push."""
        local, theirs = tip
        if local is None or (theirs is not None
                             and (theirs == local or git.is_ancestor(local, theirs))):
            return None
        if theirs is None or git.is_ancestor(theirs, local):
            return local, False
        new, kept_now = _replay(repo, ref, local, theirs, remote, first_wins)  # may move
        kept[:] = sorted({*kept, *kept_now})
        return new, True

    def lease(tip: tuple[str | None, str | None], built: tuple[str, bool] | None
              ) -> SidePush:
        local, theirs = tip
        if built is None:
            return SidePush(name, "absent") if local is None else \
                SidePush(name, "replayed" if kept else "up to date", theirs, 1, list(kept))
        new, replayed = built
        done = SidePush(name, "replayed" if replayed or kept else "pushed", new, 1, list(kept))
        proc = git.run("push", "--porcelain",
                       f"--force-with-lease={ref}:{theirs or ''}", END_OF_OPTIONS, remote,
                       f"{new}:{ref}", check=False)
        if proc.returncode == 0:
            return done
        moved = fetch_tip(repo, remote, ref)
        if moved is not None and (moved == new or git.is_ancestor(new, moved)):
            return done  # it landed although git reported a failure
        if moved == theirs:
            raise ExpgitError(f"push of {name} to {remote!r} was refused: "
                              + _one_line(proc.stdout, proc.stderr),
                              hint="everything is kept here; the next push sends it")
        raise RefMovedError(f"{name} moved on {remote!r}")  # fetch and replay again

    pushed = compare_and_swap(
        read, replay, lease, attempts=ATTEMPTS, jitter=0.05,  # spread out colliding trainers
        gave_up=lambda n: ConflictError(f"{name} on {remote!r} kept moving: gave up after "
                                        f"{n} attempts",
                                        hint="everything is kept here; push again later"))
    return replace(pushed.result, attempts=pushed.attempts)


def push_checkpoint(repo: ExperienceRepository, remote: str) -> SidePush:
    """Push the local versions checkpoint to ``remote`` as a fast-forward (a plain push:
    git refuses anything else); a remote checkpoint that is not an ancestor of the local
    one is left as it is (``diverged``): it is a cache, and the next checkpoint written
    here builds on the remote's. ExpgitError when the remote cannot be reached."""
    ref, name = version_checkpoint.REF, version_checkpoint.BRANCH
    git = repo.git
    local = git.ref(ref)
    if local is None:
        return SidePush(name, "absent")
    theirs = fetch_tip(repo, remote, ref)
    if theirs is not None and (theirs == local or git.is_ancestor(local, theirs)):
        return SidePush(name, "up to date", theirs)
    if theirs is not None and not git.is_ancestor(theirs, local):
        return SidePush(name, "diverged", theirs)
    proc = git.run("push", "--porcelain", END_OF_OPTIONS, operand(remote, "--remote"),
                   f"{local}:{ref}", check=False)
    if proc.returncode == 0:
        return SidePush(name, "pushed", local)
    moved = fetch_tip(repo, remote, ref)  # another writer's push landed first
    if moved is not None and (moved == local or git.is_ancestor(local, moved)):
        return SidePush(name, "up to date", moved)
    return SidePush(name, "diverged", moved)


def existing_refs(repo: ExperienceRepository, ids: Iterable[str],
                  states: Mapping[str, str]) -> dict[str, str]:
    """``{ref: commit}`` of the objects ``ids`` in whichever state each is now."""
    return repo.git.refs_named(prefix + i for i in dict.fromkeys(ids)
                               for prefix in states.values())


__all__ = ["ATTEMPTS", "SidePush", "check_remote", "existing_refs",
           "fetch_tip", "push_checkpoint", "push_refs", "push_side_branch", "tracking_ref",
           "union_tree"]
