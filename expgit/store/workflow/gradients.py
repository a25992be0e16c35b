"""Gradients: one proposed edit of one experience, stored as one commit on its own branch.

A gradient commit's parent is the ``main`` commit it was estimated against, and its tree
changes exactly one experience file (create, update or delete). The message carries the
rationale and the trailers ``Expgit-Target``, ``Expgit-Base-Version``, ``Expgit-Base-Blob``,
``Expgit-Confidence`` and ``Expgit-Evidence`` (repeatable). Its id is the first 12 hex
digits of the commit id; the branch is ``expgit/gradients/<id>``.

Once its proposal is applied or rejected, the branch moves to
``refs/expgit/{applied,rejected}/gradients/<id>``: out of the branch list, still in history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, field_validator

from expgit.errors import InvalidInputError
from expgit.git.objects import GITLINK_MODE, SYMLINK_MODE
from expgit.git.repo import RefMovedError, RefUpdate
from expgit.store.derived.applied import NOTHING_APPLIED, AppliedIndex, applied_index, state_of
from expgit.store.format import trailers as tr
from expgit.store.format.always_on import experience_tree
from expgit.store.format.experience import check_experience, check_name, decode_experience
from expgit.store.format.moves import layout_at
from expgit.store.refnames import (
    GRADIENT_STATES,
    GRADIENTS,
    ID_LEN,
    NotMadeByExpgit,
    Stray,
    find_by_id,
    kept_refs,
)
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.changes import FileChange, Operation, tree_changes


class GradientRequest(BaseModel):
    """A proposed edit, as a caller hands it in (CLI, estimator, HTTP)."""

    name: str
    content: str | None = None  # None together with delete=True
    delete: bool = False
    rationale: str
    evidence: list[str] = Field(default_factory=list)
    confidence: float = 0.5

    @field_validator("confidence")
    @classmethod
    def _unit(cls, value: float) -> float:
        if not (0.0 <= value <= 1.0) or math.isnan(value):
            raise ValueError("confidence must be between 0 and 1")
        return value


@dataclass
class Gradient:
    id: str
    commit: str
    parent: str
    state: str
    target: str
    base_version: int
    base_blob: str | None
    confidence: float
    rationale: str
    evidence: list[str]
    author: str
    time: int
    change: FileChange
    extra_trailers: list[tuple[str, str]] = field(default_factory=list)
    # where its ref is kept (a namespace of GRADIENT_STATES); main's history overrides
    # it: ``state`` is "applied" whenever ``applied_in`` (main's commit) is set
    location: str = "open"
    applied_in: str | None = None

    @property
    def operation(self) -> Operation:
        return self.change.operation

    @property
    def ref(self) -> str:
        return GRADIENT_STATES[self.location] + self.id


def _check_request(repo: ExperienceRepository, req: GradientRequest) -> None:
    check_name(req.name)
    if not req.rationale.strip():
        raise InvalidInputError("a gradient needs a rationale: say why this edit helps")
    for item in req.evidence:
        tr.single_line(item, "evidence")
    if req.delete != (req.content is None):
        raise InvalidInputError("give new content for an edit, or --delete without content")
    if req.content is not None:
        path = repo.path_of(req.name)
        check_experience(req.content, path, req.name, repo.settings.token_budget)


def propose(repo: ExperienceRepository, req: GradientRequest,
            extra_trailers: list[tuple[str, str]] | None = None) -> Gradient:
    """Commit the edit on a new gradient branch off the current ``main``; return it."""
    _check_request(repo, req)
    git = repo.git
    main = repo.main_commit()
    main_tree = git.read_commit(main).tree
    path = repo.path_of(req.name)
    # the target as the snapshot of main has it (a file <name>.md that is no symlink),
    # without loading the whole snapshot: its blob, and its version from the versions pass
    entry = git.path_entry(main_tree, path)
    current = entry.sha if entry is not None and not entry.is_tree \
        and entry.mode not in (SYMLINK_MODE, GITLINK_MODE) else None
    if req.delete and current is None:
        raise InvalidInputError(f"cannot delete {req.name!r}: no such experience on "
                                f"{repo.settings.main_branch}")
    if req.content is not None and current is not None \
            and decode_experience(git.read_blob(current), path) == req.content:
        raise InvalidInputError(f"{req.name}: the new content is identical to "
                                f"{repo.settings.main_branch}; nothing to propose")
    info = repo.snapshots.versions(main).get(path) if current else None
    blob = None if req.content is None else git.write_blob(req.content.encode())
    # deleting a skill deletes its whole folder
    tree = experience_tree(repo, main_tree,
                           {path if blob else repo.layout.unit_of(req.name): blob})
    operation = "delete" if blob is None else ("update" if current else "create")
    message = tr.Message(
        subject=f"gradient: {operation} {req.name}",
        body=req.rationale.strip(),
        trailers=(
            (tr.TARGET, req.name),
            (tr.BASE_VERSION, str(info.version if info else 0)),
            (tr.BASE_BLOB, current or "none"),
            (tr.CONFIDENCE, f"{req.confidence:.2f}"),
            *((tr.EVIDENCE, tr.single_line(e, "evidence")) for e in req.evidence),
            *(extra_trailers or []),
        ),
    )
    commit = git.write_commit(tree, [main], message.render())
    gid = commit[:ID_LEN]
    ref = GRADIENTS + gid
    closed = git.refs_named(GRADIENT_STATES[s] + gid for s in ("applied", "rejected"))
    if commit in closed.values():  # the same edit, the same second, already reviewed
        state = "applied" if GRADIENT_STATES["applied"] + gid in closed else "rejected"
        raise InvalidInputError(
            f"gradient {gid} ({req.name}) is this very edit, already {state}; it is not "
            "opened again", hint="change the edit, or propose it again a second later")
    try:  # a new ref; the same commit there already (the same edit, the same second): done
        git.update_refs([RefUpdate(ref, commit, None)], f"expgit propose {req.name}")
    except RefMovedError:
        if git.ref(ref) != commit:
            raise
    return load_gradient(repo, commit, "open", NOTHING_APPLIED)


def load_gradient(repo: ExperienceRepository, commit: str, location: str,
                  index: AppliedIndex | None = None) -> Gradient:
    """The gradient at ``commit``, kept in the ``location`` namespace; its state from
    main's history (``index``, read now if not given). A commit expgit did not make
    (no target trailer, not one parent, not one change of that experience, trailers
    that do not parse) raises :class:`NotMadeByExpgit`."""
    applied_in = (index or applied_index(repo)).gradient(commit)
    info = repo.git.read_commit(commit)
    msg = tr.parse_message(info.message)
    target = msg.value(tr.TARGET)
    if target is None:
        raise NotMadeByExpgit(commit, "gradient", "no expgit trailers")
    if len(info.parents) != 1:
        raise NotMadeByExpgit(commit, "gradient", f"{len(info.parents)} parents, not 1")
    # the layout the gradient was made in (before a migration: the flat one)
    layout = layout_at(repo.git, commit, repo.layout)
    changes = tree_changes(repo.git, info.parents[0], commit, layout)
    # one experience's file (in the skills layout, its folder's other files go with it)
    files = [c for c in changes if layout.name_of(c.path) is not None]
    if len(files) != 1 or files[0].name != target \
            or any(c.name != files[0].name for c in changes):
        raise NotMadeByExpgit(commit, "gradient",
                              f"changes {len(files)} experiences, not its target alone")
    changes = files
    base_blob = msg.value(tr.BASE_BLOB)
    known = {tr.TARGET, tr.BASE_VERSION, tr.BASE_BLOB, tr.CONFIDENCE, tr.EVIDENCE}
    try:
        base_version = int(msg.value(tr.BASE_VERSION) or 0)
        confidence = float(msg.value(tr.CONFIDENCE) or 0.0)
    except ValueError:
        raise NotMadeByExpgit(commit, "gradient", "a trailer that is not a number") from None
    return Gradient(
        id=commit[:ID_LEN], commit=commit, parent=info.parents[0],
        state=state_of(location, applied_in), location=location, applied_in=applied_in,
        target=target, base_version=base_version,
        base_blob=None if base_blob in (None, "none") else base_blob,
        confidence=confidence, rationale=msg.body,
        evidence=msg.values(tr.EVIDENCE), author=info.author, time=info.author_time,
        change=changes[0], extra_trailers=[t for t in msg.trailers if t[0] not in known])


def list_gradients(repo: ExperienceRepository, states: tuple[str, ...] = ("open",),
                   *, strays: list[Stray] | None = None) -> list[Gradient]:
    """The gradients in ``states``, as main's history decides them: a gradient is
    applied when a commit of main carries it, wherever its ref is kept. Only those
    wanted are read. A ref whose commit expgit did not make is skipped, and added to
    ``strays`` when given."""
    index = applied_index(repo)
    found = []
    for sha, (location, ref) in kept_refs(repo, GRADIENT_STATES, strays).items():
        if state_of(location, index.gradient(sha)) not in states:
            continue
        try:
            found.append(load_gradient(repo, sha, location, index))
        except NotMadeByExpgit as stray:
            if strays is not None:
                strays.append(Stray(ref, stray.reason))
    return sorted(found, key=lambda g: (g.time, g.id))


def find_gradient(repo: ExperienceRepository, gid: str) -> Gradient:
    location, sha = find_by_id(repo, GRADIENT_STATES, gid, "gradient",
                               "list them with `expgit gradients`")
    return load_gradient(repo, sha, location)
