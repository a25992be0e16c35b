"""What ``main``'s history applied: the state of proposals and gradients, read from history.

A proposal is applied exactly when ``main``'s history contains it, in any of the ways a
forge merges a pull request:

* its commit itself (a fast-forward, or a merge commit whose second parent it is);
* a commit that carries its id: ``Expgit-Rebased-From: <its commit>`` (expgit rebuilt it
  on a moved ``main``) or ``Expgit-Proposal: <its id>`` (a squash merge whose message is
  the PR body that ``expgit pr`` wrote);
* a commit that carries all of its ``Expgit-Gradient`` trailers (a rebase merge, which
  keeps the message and changes the commit id).

A migration proposal (``expgit migrate``) has no gradients: its commit carries
``Expgit-Migrated-From``, and it is applied when its commit or its rebuilt commit is.

A gradient is applied when a commit of that history carries it in an ``Expgit-Gradient``
trailer. Nothing here is stored beside ``main``: the index is derived from the commits,
and the cache of it (:mod:`expgit.store.derived`) is keyed by the tip it was read at, so
it cannot disagree with history. A newer tip that descends from the cached one is read
incrementally (``git log OLD..NEW``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from expgit.git.repo import GitRepo
from expgit.store import trailers as tr
from expgit.store.derived import keyed_cache_file, read_cache, write_cache
from expgit.store.repository import ExperienceRepository

FORMAT = "applied-1"
ID_LEN = 12
_KEYS = (tr.GRADIENT, tr.REBASED_FROM, tr.PROPOSAL, tr.MIGRATED_FROM)
_FIELD, _RECORD = "\x1f", "\x1e"


@dataclass(frozen=True)
class AppliedIndex:
    """``proposals``: proposal id -> the commit of ``main`` that applied it;
    ``gradients``: gradient commit -> the commit of ``main`` that carries it."""

    tip: str | None
    proposals: Mapping[str, str] = field(default_factory=dict)
    gradients: Mapping[str, str] = field(default_factory=dict)

    def proposal(self, commit: str, gradient_commits: Iterable[str]) -> str | None:
        """The commit of ``main`` that applied the proposal ``commit``, or None."""
        found = self.proposals.get(commit[:ID_LEN])
        if found is not None:
            return found
        carriers = {self.gradients.get(g) for g in gradient_commits}
        if len(carriers) == 1:
            return carriers.pop()  # None when it has no gradient on main
        return None

    def gradient(self, commit: str) -> str | None:
        return self.gradients.get(commit)


# what a just-made gradient or proposal is read with: nothing of main can hold it yet
NOTHING_APPLIED = AppliedIndex(None)


def state_of(location: str, applied_in: str | None) -> str:
    """A proposal's or gradient's state: applied when main's history shows it (wherever
    its ref is kept), else rejected when its ref is kept as rejected, else open."""
    if applied_in is not None:
        return "applied"
    return "rejected" if location == "rejected" else "open"


def _walk(git: GitRepo, revs: list[str], proposals: dict[str, str],
          gradients: dict[str, str]) -> None:
    """Add what the commits of ``git log REVS`` carry (newest first, so an older
    commit never overrides the newest that applied something: iterate reversed)."""
    keys = ",".join(f"key={k}" for k in _KEYS)
    fmt = f"%H{_FIELD}%(trailers:{keys},unfold,separator=%x1f){_RECORD}"
    text = git.out("log", f"--format={fmt}", *revs, "--")
    carried: dict[str, list[str]] = {}
    for record in text.split(_RECORD):
        sha, *lines = record.strip("\n").split(_FIELD)
        if sha:
            carried[sha] = lines
    # a squash merge whose forge added a paragraph after the PR body's trailers: read
    # the whole message of those few (only they carry Expgit-Proposal)
    squashed = git.out("log", f"--format=%H{_FIELD}%B{_RECORD}", "-i",
                       f"--grep=^{tr.PROPOSAL}:", *revs, "--")
    for record in squashed.split(_RECORD):
        sha, _, body = record.strip("\n").partition(_FIELD)
        if sha in carried:
            carried[sha] = [f"{k}: {v}" for k, v in tr.scattered(body).trailers]
    for sha, lines in reversed(carried.items()):
        for line in lines:
            key, _, value = line.partition(":")
            key, value = key.strip().lower(), value.strip().lower()
            if not value:
                continue
            if key == tr.GRADIENT.lower():
                proposals.setdefault(sha[:ID_LEN], sha)  # a proposal commit itself
                gradients.setdefault(value, sha)
            elif key == tr.MIGRATED_FROM.lower():  # a migration proposal's own commit
                proposals.setdefault(sha[:ID_LEN], sha)
            elif key in (tr.REBASED_FROM.lower(), tr.PROPOSAL.lower()):
                proposals.setdefault(value[:ID_LEN], sha)


def applied_index(repo: ExperienceRepository, tip: str | None = None) -> AppliedIndex:
    """The index of what ``main`` (or the commit ``tip``) has applied."""
    if tip is None:
        tip = repo.git.ref(repo.main_ref)
    if tip is None:
        return AppliedIndex(None)
    memo = _MEMO.get(repo.git.common_dir)
    if memo is not None and memo.tip == tip:
        return memo
    path = keyed_cache_file(repo.git.common_dir, "applied-", repo.main_ref)
    proposals: dict[str, str] = {}
    gradients: dict[str, str] = {}
    cached = _valid(read_cache(path, FORMAT))
    base = cached.get("tip") if cached else None
    if cached and isinstance(base, str) and base == tip:
        index = AppliedIndex(tip, dict(cached["proposals"]), dict(cached["gradients"]))
        _MEMO[repo.git.common_dir] = index
        return index
    if cached and isinstance(base, str) and repo.git.is_ancestor(base, tip):
        proposals, gradients = dict(cached["proposals"]), dict(cached["gradients"])
        # newer commits first in the log, so the walk's setdefault keeps the older
        # (already cached) carrier: the first commit that applied a thing wins
        _walk(repo.git, [tip, f"^{base}"], proposals, gradients)
    else:
        _walk(repo.git, [tip], proposals, gradients)
    write_cache(path, FORMAT, {"tip": tip, "proposals": proposals, "gradients": gradients})
    index = AppliedIndex(tip, proposals, gradients)
    _MEMO[repo.git.common_dir] = index
    return index


_MEMO: dict[object, AppliedIndex] = {}


def _valid(entries: dict[str, object] | None) -> dict[str, Any] | None:
    """The cache's entries if they have its shape (a tip and two string maps)."""
    if entries is None or not isinstance(entries.get("tip"), str):
        return None
    for name in ("proposals", "gradients"):
        table = entries.get(name)
        if not isinstance(table, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
            return None
    return entries
