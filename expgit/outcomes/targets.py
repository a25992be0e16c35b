"""Where an outcome's target lives, and its canonical id (see :mod:`expgit.outcomes.records`).

:func:`resolve_target` returns the canonical id of an existing target of the named kind.
An id that names no such target but does name a target of another kind is a
ConflictError (the caller picked the wrong kind); an id that names nothing is a
NotFoundError. Reads only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from expgit.errors import ConflictError, InvalidInputError, NotFoundError
from expgit.outcomes.records import TARGET_KINDS, TargetKind
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import find_proposal
from expgit.train.records.trajectory_store import FOLDER, ID_LEN, TrajectoryStore

_ROLLOUT_ID = re.compile(rf"[0-9a-f]{{{ID_LEN}}}")  # whole strings: fullmatch
_HEX = re.compile(r"[0-9a-f]{4,40}")

Resolver = Callable[[ExperienceRepository, str], str | None]


def _rollout(repo: ExperienceRepository, target_id: str) -> str | None:
    tid = target_id.strip().lower()
    if not _ROLLOUT_ID.fullmatch(tid):
        return None
    return tid if TrajectoryStore(repo).find(tid) is not None else None


def _trajectory(repo: ExperienceRepository, target_id: str) -> str | None:
    store = TrajectoryStore(repo)
    text = target_id.strip()
    if ":" in text:  # a URI: only of the configured trajectories branch and folder
        branch, _, path = text.partition(":")
        branch = branch.removeprefix("refs/heads/")
        match = re.fullmatch(rf"{FOLDER}/[0-9a-f]{{2}}/([0-9a-f]{{{ID_LEN}}})\.md", path)
        if branch != store.branch or match is None or path != store.path_of(match[1]):
            return None
        tid = match[1]
    else:
        tid = text.lower()
        if not _ROLLOUT_ID.fullmatch(tid):
            return None
    return store.stored_uri(tid)


def _experience(repo: ExperienceRepository, target_id: str) -> str | None:
    name = target_id.strip()
    try:
        path = repo.path_of(name)
    except InvalidInputError:
        return None
    main = repo.git.ref(repo.main_ref)
    if main is None:
        return None
    entry = repo.git.path_entry(repo.git.read_commit(main).tree, path)
    return name if entry is not None and not entry.is_tree else None


def _proposal(repo: ExperienceRepository, target_id: str) -> str | None:
    pid = target_id.strip().lower()
    if not _HEX.fullmatch(pid):
        return None
    try:
        return find_proposal(repo, pid).id
    except NotFoundError:
        return None


RESOLVERS: dict[TargetKind, Resolver] = {
    "rollout": _rollout, "trajectory": _trajectory, "experience": _experience,
    "proposal": _proposal,
}

_HINTS: dict[TargetKind, str] = {
    "rollout": "a rollout id is the 16-hex content id of a stored trajectory "
               "(`git ls-tree` the trajectories branch)",
    "trajectory": "give a trajectory URI <branch>:trajectories/<ab>/<id>.md or its 16-hex id",
    "experience": "give an experience name on main (`expgit list`)",
    "proposal": "give a proposal id (`expgit proposals --state all`)",
}


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def resolve_target(repo: ExperienceRepository, kind: TargetKind, target_id: str) -> str:
    """The canonical id of the ``kind`` target ``target_id``.

    Raises NotFoundError if nothing has that id, ConflictError if only a target of another
    kind has it, InvalidInputError if a proposal id prefix is ambiguous."""
    found = RESOLVERS[kind](repo, target_id)
    if found is not None:
        return found
    for other in TARGET_KINDS:
        if other == kind:
            continue
        try:
            elsewhere = RESOLVERS[other](repo, target_id)
        except InvalidInputError:
            elsewhere = None
        if elsewhere is not None:
            raise ConflictError(f"{target_id!r} is {_a(other)}, not {_a(kind)}",
                                hint=f"submit it with target kind {other!r}")
    raise NotFoundError(f"no {kind} {target_id!r}", hint=_HINTS[kind])
