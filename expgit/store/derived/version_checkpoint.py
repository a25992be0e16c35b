"""A versions checkpoint that travels with the repository: the versions of one ``main``
commit, stored in git on the branch ``expgit/versions``, so that the first ``list`` after
a clone walks only the commits after it instead of the whole history.

It is a cache, never the truth. The branch holds one file per experiences root
(``<digest of the root>.json``: the root, the commit it describes and ``{path: [version,
last commit, first commit]}``); a checkpoint is used only when its commit is an ancestor
of the commit asked about with no merge commit in between (across a merge, ``git log``'s history
simplification can count differently), and it is checked for shape and bounded in size
before use (what another clone pushed is untrusted). Anything else is ignored and the
versions are counted from history, as without it.

``git clone`` fetches it with the other branches: a bare clone as
``refs/heads/expgit/versions``, a clone with a work tree as
``refs/remotes/<remote>/expgit/versions``; both are read. It is written by
:func:`refresh` (``expgit apply`` after it moved ``main``, and ``doctor --fix``) once
``main`` is :data:`EVERY` commits past the last checkpoint: a commit on top of the
previous one (the local branch's, or in a clone that has only the remote-tracking one,
that one's: a fast-forward, so it pushes without force), moved by compare-and-swap; a
writer that loses the race leaves it to the next one. ``--remote`` pushes it
(:func:`expgit.store.workflow.remote_sync.push_checkpoint`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from expgit.errors import ExpgitError
from expgit.git.repo import GitRepo, RefUpdate

BRANCH = "expgit/versions"
REF = f"refs/heads/{BRANCH}"
FORMAT = "versions-checkpoint-1"  # versions: path -> [version, last, first commit]
EVERY = 1000  # commits of main past the checkpoint before a new one is written
MAX_BYTES = 64 * 2 ** 20  # a checkpoint blob larger than this is ignored


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str
    root: str
    commit: str
    versions: dict[str, tuple[int, str, str]]


def file_name(root: str) -> str:
    return f"{hashlib.sha1(root.encode()).hexdigest()[:16]}.json"


def _candidates(git: GitRepo) -> list[str]:
    """The checkpoint branch tips to try: the local branch, then remote-tracking ones."""
    return git.branch_tips(BRANCH)


def _read(git: GitRepo, tip: str, root: str) -> Checkpoint | None:
    try:
        entry = git.path_entry(git.read_commit(tip).tree, file_name(root))
        if entry is None or entry.is_tree:
            return None
        data = git.read_blob(entry.sha)
        if len(data) > MAX_BYTES:
            return None
        found = Checkpoint.model_validate_json(data)
    except (ExpgitError, ValidationError, ValueError):
        return None
    prefix = root + "/"
    if (found.format != FORMAT or found.root != root or not _is_sha(found.commit)
            or not all(p.startswith(prefix) and v >= 1 and _is_sha(c) and _is_sha(f)
                       for p, (v, c, f) in found.versions.items())):
        return None
    return found


def _is_sha(text: str) -> bool:
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


def linear_since(git: GitRepo, base: str, commit: str) -> bool:
    """Whether ``base`` is an ancestor of ``commit`` with no merge commit in between."""
    if not git.is_ancestor(base, commit):
        return False
    proc = git.run("rev-list", "--count", "--min-parents=2", commit, f"^{base}", check=False)
    return proc.returncode == 0 and proc.stdout.strip() == b"0"


def usable(git: GitRepo, root: str, commit: str) -> Checkpoint | None:
    """The checkpoint of ``root`` whose versions ``commit``'s can be derived from (its
    commit an ancestor, through single-parent commits only), or None."""
    for tip in _candidates(git):
        found = _read(git, tip, root)
        if found is not None and linear_since(git, found.commit, commit):
            return found
    return None


def is_due(git: GitRepo, root: str, main: str) -> bool:
    """Whether ``main`` is :data:`EVERY` commits past the last checkpoint (or has that
    many commits and there is none)."""
    tip = git.ref(REF)
    found = _read(git, tip, root) if tip else None
    revs = [main] + ([f"^{found.commit}"] if found is not None else [])
    proc = git.run("rev-list", "--count", f"--max-count={EVERY}", *revs, check=False)
    return proc.returncode == 0 and int(proc.stdout.strip() or 0) >= EVERY


def write(git: GitRepo, root: str, commit: str,
          versions: Mapping[str, tuple[int, str, str]]) -> str | None:
    """Commit the checkpoint of ``root`` at ``commit`` on the branch; the new tip, or None
    when another writer moved the branch meanwhile (it is a cache: left to the next)."""
    tip = git.ref(REF)
    parent = tip or next(iter(_candidates(git)), None)  # the remote's, in a fresh clone
    data = Checkpoint(format=FORMAT, root=root, commit=commit,
                      versions=dict(versions)).model_dump_json().encode()
    tree = git.edit_tree(git.read_commit(parent).tree if parent else None,
                         {file_name(root): git.write_blob(data)})
    new = git.write_commit(tree, [parent] if parent else [],
                           f"expgit: versions checkpoint of {root} at {commit[:12]}\n")
    try:
        git.update_refs([RefUpdate(REF, new, tip)], "expgit: versions checkpoint")
    except ExpgitError:
        return None
    return new


def refresh(git: GitRepo, root: str, main: str,
            versions_of: Callable[[str], Mapping[str, tuple[int, str, str]]]) -> str | None:
    """Write a new checkpoint of ``main`` when one is due; the new tip or None. Never
    fails the caller: it is a cache."""
    try:
        if not is_due(git, root, main):
            return None
        return write(git, root, main, versions_of(main))
    except ExpgitError:
        return None
