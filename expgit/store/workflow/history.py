"""The audit trail, read from ``main``'s history: show, log (``list`` is the catalog).

Every policy update is a commit on ``main``. Its kind comes from its message: a proposal
carries ``Expgit-Gradient`` trailers, a layout migration ``Expgit-Migrated-From``, a
revert ``Expgit-Reverts`` (or ``git revert``'s own "This reverts commit" sentence), a
root commit is the init, anything else is a hand-made commit. Nothing is stored besides
git objects, refs and notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from expgit.errors import InvalidInputError, NotFoundError
from expgit.git.objects import GITLINK_MODE, SYMLINK_MODE
from expgit.git.operands import END_OF_OPTIONS
from expgit.git.repo import GitRepo
from expgit.store.format import trailers as tr
from expgit.store.format.experience import decode_experience
from expgit.store.format.moves import layout_at, moves_in
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import Gradient, load_gradient
from expgit.store.workflow.proposals import kept_gradient_sets
from expgit.store.workflow.review import read_note


@dataclass
class ChangeSummary:
    name: str
    operation: str
    added: int
    removed: int


@dataclass
class PolicyUpdate:
    commit: str
    kind: str  # init | proposal | migration | revert | manual
    subject: str
    description: str
    author: str
    time: int
    changes: list[ChangeSummary]
    gradients: list[Gradient] = field(default_factory=list)
    missing_gradients: list[str] = field(default_factory=list)
    proposal: str | None = None
    reverts: str | None = None
    reverted_by: list[str] = field(default_factory=list)
    note: str | None = None


def _carrier(git: GitRepo, sha: str, parents: Sequence[str], msg: tr.Message
             ) -> tuple[str, tr.Message]:
    """The commit whose message describes the update ``sha`` made on the first-parent
    line, and that message: ``sha`` itself, or for a merge commit (a forge's "merge
    pull request") the merged parent that is a proposal."""
    if len(parents) > 1 and not msg.values(tr.GRADIENT):
        for parent in parents[1:]:
            merged = tr.parse_message(git.read_commit(parent).message)
            if merged.values(tr.GRADIENT):
                return parent, merged
    return sha, msg


class _ProposalOwners:
    """The proposal id an applied update stands for: the id it carries (a squash merge
    of ``expgit pr``'s body, a rebuilt proposal), else the kept proposal with exactly
    its gradients (a forge's rebase merge copies the message to a new commit), else
    the commit's own id (a fast-forward or a merged proposal commit)."""

    def __init__(self, repo: ExperienceRepository) -> None:
        self.repo = repo
        self._by_gradients: dict[frozenset[str], str] | None = None

    def of(self, commit: str, msg: tr.Message) -> str:
        named = msg.value(tr.PROPOSAL) or msg.value(tr.REBASED_FROM)
        if named:
            return named[:12].lower()
        if self._by_gradients is None:
            self._by_gradients = kept_gradient_sets(self.repo)
        return self._by_gradients.get(frozenset(msg.values(tr.GRADIENT)), commit[:12])


def _object_exists(git: GitRepo, sha: str) -> bool:
    # ``sha``: a trailer value, which any commit message may hold: never an option
    return git.run("cat-file", "-e", END_OF_OPTIONS, f"{sha}^{{commit}}",
                   check=False).returncode == 0


def policy_log(repo: ExperienceRepository, name: str | None = None, *, rev: str | None = None,
               limit: int | None = None) -> list[PolicyUpdate]:
    """Policy updates on ``main`` (or ``rev``), newest first; only those touching ``name``."""
    from expgit.store.workflow.changes import tree_changes

    tip = repo.commit(rev) if rev else repo.main_commit()
    paths = _history_paths(repo, name, tip) if name else [f"{repo.root}/"]
    shas = repo.git.out("log", "--first-parent", "--format=%H",
                        *(["-n", str(limit)] if limit else []), tip, "--", *paths).split()
    updates = []
    owners = _ProposalOwners(repo)
    for sha in shas:
        info = repo.git.read_commit(sha)
        carrier, msg = _carrier(repo.git, sha, info.parents, tr.scattered(info.message))
        changes = tree_changes(repo.git, info.parents[0] if info.parents else None, sha,
                               layout_at(repo.git, sha, repo.layout))
        grads = msg.values(tr.GRADIENT)
        reverts = tr.reverted_commit(msg)
        kind = ("init" if not info.parents else "revert" if reverts
                else "proposal" if grads
                else "migration" if msg.value(tr.MIGRATED_FROM) else "manual")
        update = PolicyUpdate(
            commit=sha, kind=kind, subject=msg.subject, description=msg.body,
            author=info.author, time=info.author_time,
            changes=[ChangeSummary(c.name, c.operation, *c.counts) for c in changes
                     if name is None or c.name == name],
            proposal=owners.of(carrier, msg) if grads else None,
            reverts=reverts, note=read_note(repo.git, sha))
        for g in grads:
            try:
                if not _object_exists(repo.git, g):
                    raise NotFoundError(f"gradient {g} is not in the repository")
                update.gradients.append(load_gradient(repo, g, "applied"))
            except InvalidInputError:
                # gone (pruned, shallow clone) or not a gradient (a hand-written trailer):
                # the log still shows the update and names what it cannot load
                update.missing_gradients.append(g)
        updates.append(update)
    by_sha = {u.commit: u for u in updates}
    for u in updates:
        if u.reverts and u.reverts in by_sha:
            by_sha[u.reverts].reverted_by.append(u.commit)
    return updates


def _history_paths(repo: ExperienceRepository, name: str, tip: str) -> list[str]:
    """What ``name`` was in ``tip``'s history: its unit now, and its flat file before
    each layout move into the current root (:mod:`expgit.store.format.moves`)."""
    found = [repo.layout.unit_of(name)]
    for move in moves_in(repo.git, [tip]).values():
        if move.to_root == repo.root:
            found.append(move.old_path(name))
    return list(dict.fromkeys(found))


def _version_commit(repo: ExperienceRepository, name: str, path: str, tip: str,
                    version: int) -> str:
    """The commit that made version ``version`` of ``path`` in ``tip``'s history.

    The versions of ``tip`` (the version cache: no walk when it holds them) give the
    count, the last commit and the first; a walk back from that commit (``git log -n``, cheap with
    the commit-graph's changed-path Bloom filters) is needed only for an older version,
    and stops at it."""
    info = repo.snapshots.versions(tip).get(path)
    count = info.version if info is not None else 0
    if info is None or not 1 <= version <= count:
        raise NotFoundError(f"{name} has versions 1 to {count}, not {version}")
    if version == count:
        return info.last_commit
    if version == 1:
        return info.first_commit
    back = count - version + 1
    paths = [path, *_history_paths(repo, name, tip)[1:]]  # its files before a move too
    history = repo.git.out("log", "--format=%H", "--no-renames", "-n", str(back),
                           info.last_commit, "--", *paths).split()
    if len(history) != back:  # history simplified differently (merges): count it all
        history = repo.git.out("log", "--format=%H", "--no-renames", "--reverse", tip, "--",
                               *paths).split()
        if not 1 <= version <= len(history):
            raise NotFoundError(f"{name} has versions 1 to {len(history)}, not {version}")
        return history[version - 1]
    return history[-1]


@dataclass
class ShownExperience:
    name: str
    commit: str
    version: int
    blob: str
    content: str


def show_experience(repo: ExperienceRepository, name: str, *, rev: str | None = None,
                    version: int | None = None) -> ShownExperience:
    path = repo.path_of(name)
    tip = repo.commit(rev) if rev else repo.main_commit()
    if version is not None:
        # the version is known: only the one file is read (a snapshot of that old commit
        # would count its whole history again)
        tip = _version_commit(repo, name, path, tip, version)
        tree = repo.git.read_commit(tip).tree
        found = repo.git.path_entry(tree, path)
        if found is None:  # a version from before a layout move: its file then
            path = layout_at(repo.git, tip, repo.layout).path_of(name)
            found = repo.git.path_entry(tree, path)
        if found is not None and not found.is_tree \
                and found.mode not in (SYMLINK_MODE, GITLINK_MODE):
            text = decode_experience(repo.git.read_blob(found.sha), path)
            return ShownExperience(name, tip, version, found.sha, text)
    snapshot = repo.snapshots.load(tip) if version is None else None
    entry = snapshot.get(name) if snapshot is not None else None
    if entry is None:
        where = f"version {version}" if version else f"{rev or repo.settings.main_branch}"
        raise NotFoundError(f"no experience {name!r} at {where}"
                            + (" (that version deleted it)" if version else ""),
                            hint="see `expgit list` and `expgit log NAME`")
    return ShownExperience(name, tip, entry.version, entry.blob, entry.text)
