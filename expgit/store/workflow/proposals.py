"""Proposals: gradients merged into one commit plus a PR description, ready for review.

A proposal commit's parent is the ``main`` commit it was planned on; its message is the PR
description (rendered from ``templates/proposal.md.j2``) followed by one
``Expgit-Gradient: <sha>`` trailer per merged gradient. Its id is the first 12 hex digits
of the commit id; the branch is ``expgit/proposals/<id>``.

How gradients become a plan is the :class:`GradientMerger` port: this module ships the
mechanical merger; the LLM patch-merge optimizer implements the same Protocol.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from expgit.errors import ConflictError, InvalidInputError
from expgit.git.repo import RefUpdate
from expgit.store.derived.applied import NOTHING_APPLIED, AppliedIndex, applied_index, state_of
from expgit.store.derived.predictions import (
    PredictionRecords,
    TrackRecord,
    prediction_record,
    read_prediction,
    shown_confidence,
    trainer_model,
)
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format import templates
from expgit.store.format import trailers as tr
from expgit.store.format.always_on import experience_tree
from expgit.store.format.experience import check_experience
from expgit.store.format.provenance import Provenance
from expgit.store.refnames import (
    ID_LEN,
    PROPOSAL_STATES,
    PROPOSALS,
    NotMadeByExpgit,
    Stray,
    find_by_id,
    kept_refs,
)
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.changes import FileChange, tree_changes
from expgit.store.workflow.gradients import Gradient, find_gradient, list_gradients

_BACKTICKS = re.compile(r"`+")


@dataclass
class PlanItem:
    """The new state of one experience: ``after`` content, or None to delete it."""

    name: str
    after: str | None
    gradients: list[Gradient]
    confidence: float
    rationale: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class MergeConflict:
    name: str
    gradient_ids: list[str]
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.reason} ({', '.join(self.gradient_ids)})"


@dataclass
class MergePlan:
    items: list[PlanItem]
    conflicts: list[MergeConflict] = field(default_factory=list)


class GradientMerger(Protocol):
    """Turns a batch of gradients into one plan against one snapshot of ``main``.

    May assume: every gradient is open and its target name is valid; ``snapshot`` is the
    current ``main``. Must: cite in each item the gradients it came from; report every
    pair of edits it cannot reconcile as a :class:`MergeConflict` (never drop one
    silently); return only items that change something. Must never write to the
    repository: the caller validates the plan and commits it. Raises ExpgitError only
    for failures of its own machinery (an LLM error), not for conflicts.
    """

    name: str

    def plan(self, gradients: Sequence[Gradient], snapshot: Snapshot) -> MergePlan: ...


class MechanicalMerger:
    """Combines edits of different files, collapses identical edits, refuses the rest."""

    name = "mechanical"

    def plan(self, gradients: Sequence[Gradient], snapshot: Snapshot) -> MergePlan:
        groups: dict[str, list[Gradient]] = {}
        for gradient in gradients:
            groups.setdefault(gradient.target, []).append(gradient)
        plan = MergePlan(items=[])
        for name, unordered in sorted(groups.items()):
            # Most confident first: its rationale and evidence lead the description.
            group = sorted(unordered, key=lambda g: (-g.confidence, g.time, g.id))
            current = snapshot.get(name)
            stale = [g for g in group if g.base_blob != (current.blob if current else None)]
            if stale:
                plan.conflicts.append(MergeConflict(
                    name, [g.id for g in stale],
                    "edited on main since this gradient was made; re-estimate it"))
                continue
            afters = {g.change.new_blob for g in group}
            if len(afters) > 1:
                plan.conflicts.append(MergeConflict(
                    name, [g.id for g in group], "different edits of the same experience"))
                continue
            after = group[0].change
            plan.items.append(PlanItem(
                name=name, after=after.new_text if after.new_blob else None,
                gradients=list(group), confidence=max(g.confidence for g in group),
                rationale=" / ".join(dict.fromkeys(g.rationale for g in group)),
                evidence=list(dict.fromkeys(e for g in group for e in g.evidence))))
        return plan


@dataclass
class Proposal:
    id: str
    commit: str
    base: str
    state: str
    subject: str
    description: str
    gradient_commits: list[str]
    author: str
    time: int
    changes: list[FileChange]
    rebased_from: str | None = None
    # where its ref is kept (a namespace of PROPOSAL_STATES), which main's history
    # overrides: ``state`` is "applied" whenever ``applied_in`` (main's commit) is set
    location: str = "open"
    applied_in: str | None = None

    @property
    def ref(self) -> str:
        return PROPOSAL_STATES[self.location] + self.id


def load_proposal(repo: ExperienceRepository, commit: str, location: str,
                  index: AppliedIndex | None = None) -> Proposal:
    """The proposal at ``commit``, kept in the ``location`` namespace; its state from
    main's history (``index``, read now if not given)."""
    info = repo.git.read_commit(commit)
    msg = tr.parse_message(info.message)
    gradients = _made_by_expgit(commit, len(info.parents), msg)
    applied_in = (index or applied_index(repo)).proposal(commit, gradients)
    return Proposal(
        id=commit[:ID_LEN], commit=commit, base=info.parents[0],
        state=state_of(location, applied_in),
        subject=msg.subject, description=msg.body, gradient_commits=gradients,
        author=info.author, time=info.author_time,
        changes=tree_changes(repo.git, info.parents[0], commit, repo.layout),
        rebased_from=msg.value(tr.REBASED_FROM), location=location, applied_in=applied_in)


_SHA = re.compile(r"[0-9a-f]{40}")


def _made_by_expgit(commit: str, parents: int, msg: tr.Message) -> list[str]:
    """The gradient commits a proposal's trailers name; :class:`NotMadeByExpgit` for a
    commit that is none: expgit's proposals have one parent and expgit's trailers."""
    gradients = msg.values(tr.GRADIENT)
    if not any(key.lower().startswith("expgit-") for key, _ in msg.trailers):
        raise NotMadeByExpgit(commit, "proposal", "no expgit trailers")
    if parents != 1:
        raise NotMadeByExpgit(commit, "proposal", f"{parents} parents, not 1")
    if not all(_SHA.fullmatch(g) for g in gradients):
        raise NotMadeByExpgit(commit, "proposal", "a gradient trailer that is no commit id")
    return gradients


def _kept(repo: ExperienceRepository, strays: list[Stray] | None = None
          ) -> list[tuple[str, str, str]]:
    """``(location, commit, ref)`` of every proposal ref, each commit once."""
    return [(location, sha, ref) for sha, (location, ref)
            in kept_refs(repo, PROPOSAL_STATES, strays).items()]


def _headline(repo: ExperienceRepository, sha: str) -> tuple[int, list[str]]:
    info = repo.git.read_commit(sha)
    msg = tr.parse_message(info.message)
    return info.author_time, _made_by_expgit(sha, len(info.parents), msg)


def _in_states(repo: ExperienceRepository, index: AppliedIndex, states: tuple[str, ...],
               strays: list[Stray] | None = None) -> list[tuple[str, str, int, list[str]]]:
    """``(location, commit, time, gradient commits)`` of the kept proposals whose state
    is one of ``states``. One applied by id (the common case of the archive) is decided
    without reading its commit. A ref whose commit expgit did not make is skipped, and
    added to ``strays`` when given."""
    found = []
    for location, sha, ref in _kept(repo, strays):
        applied_by_id = sha[:ID_LEN] in index.proposals
        if applied_by_id and "applied" not in states:
            continue
        try:
            when, gradients = _headline(repo, sha)
        except NotMadeByExpgit as stray:
            if strays is not None:
                strays.append(Stray(ref, stray.reason))
            continue
        if applied_by_id or state_of(location, index.proposal(sha, gradients)) in states:
            found.append((location, sha, when, gradients))
    return found


def kept_gradient_sets(repo: ExperienceRepository) -> dict[frozenset[str], str]:
    """``{its gradient commits: proposal id}`` of every kept proposal expgit made."""
    found = {}
    for _, sha, _ in _kept(repo):
        try:
            found[frozenset(_headline(repo, sha)[1])] = sha[:ID_LEN]
        except NotMadeByExpgit:
            continue  # listings name it, and doctor
    return found


def list_proposals(repo: ExperienceRepository, states: tuple[str, ...] = ("open",),
                   *, strays: list[Stray] | None = None) -> list[Proposal]:
    """The proposals in ``states``, as main's history decides them (a proposal merged
    by a forge is applied although its branch is still there). A ref whose commit
    expgit did not make is skipped, and added to ``strays`` when given."""
    index = applied_index(repo)
    found = [load_proposal(repo, sha, location, index)
             for location, sha, _, _ in _in_states(repo, index, states, strays)]
    return sorted(found, key=lambda p: (p.time, p.id))


def open_proposal_gradients(repo: ExperienceRepository) -> dict[str, str]:
    """``{gradient commit: proposal id}`` over the open proposals: what
    :func:`list_proposals` tells about them, from their messages alone (no diffs)."""
    found = sorted((when, sha[:ID_LEN], gradients) for _, sha, when, gradients
                   in _in_states(repo, applied_index(repo), ("open",)))
    return {gradient: pid for _, pid, gradients in found for gradient in gradients}


def find_proposal(repo: ExperienceRepository, pid: str) -> Proposal:
    location, sha = find_by_id(repo, PROPOSAL_STATES, pid, "proposal",
                               "list them with `expgit proposals`")
    return load_proposal(repo, sha, location)


def item_record(records: PredictionRecords, name: str, gradients: Sequence[Gradient]
                ) -> TrackRecord:
    """The track record an item's shown confidence follows: the worst of its gradients'
    (each its proposing model's, or without one the experience's)."""
    found = [records.of(name, trainer_model(g.extra_trailers)) for g in gradients]
    return min(found, key=lambda r: r.factor, default=TrackRecord())


def _subject(items: Sequence[PlanItem]) -> str:
    names = ", ".join(item.name for item in items)
    subject = f"expgit: update {len(items)} experience{'s' if len(items) != 1 else ''}: {names}"
    return subject if len(subject) <= 72 else subject[:69] + "..."


def hunks(diff: str) -> str:
    """A diff without its ``--- a/``/``+++ b/`` header: in a commit message a line
    starting ``--- `` is where git (``interpret-trailers``, ``am``) sees a patch begin, and
    would lose the trailers after it. The heading above each diff names the file."""
    lines = diff.splitlines(keepends=True)
    return "".join(lines[2:]) if len(lines) > 2 and lines[0].startswith("--- ") else diff


def _fence(diff: str) -> str:
    longest = max(map(len, _BACKTICKS.findall(diff)), default=0)
    return "`" * max(3, longest + 1)


def merge(repo: ExperienceRepository, gradient_ids: Sequence[str] | None = None, *,
          merger: GradientMerger | None = None, pr_body: Path | None = None,
          strays: list[Stray] | None = None) -> Proposal:
    """Merge the named gradients (all unmerged open ones if None) into a proposal; the
    refs of gradients expgit did not make are skipped, and added to ``strays``."""
    merger = merger or MechanicalMerger()
    in_proposals = open_proposal_gradients(repo)
    if gradient_ids is None:
        gradients = [g for g in list_gradients(repo, strays=strays)
                     if g.commit not in in_proposals]
        if not gradients:
            raise InvalidInputError("no open gradients to merge",
                                    hint="make one with `expgit propose`")
    else:
        gradients = list({g.commit: g for g in map(
            lambda gid: find_gradient(repo, gid), gradient_ids)}.values())
        if not gradients:
            raise InvalidInputError("name at least one gradient, or use --all")
    for g in gradients:
        if g.state != "open":
            raise ConflictError(f"gradient {g.id} was already {g.state}")
        if g.commit in in_proposals:
            raise ConflictError(f"gradient {g.id} is already in proposal "
                                f"{in_proposals[g.commit]}",
                                hint="review or reject that proposal first")
    main = repo.main_commit()
    snapshot = repo.snapshot(main)
    plan = merger.plan(gradients, snapshot)
    if plan.conflicts:
        raise ConflictError(
            "cannot merge: " + "; ".join(map(str, plan.conflicts)),
            conflicts=[str(c) for c in plan.conflicts],
            hint="merge the compatible gradients separately, or reject the stale ones")
    return commit_plan(repo, plan, main, snapshot, gradients, merger.name, pr_body)


def commit_plan(repo: ExperienceRepository, plan: MergePlan, main: str, snapshot: Snapshot,
                gradients: Sequence[Gradient], merger_name: str, pr_body: Path | None,
                *, provenance: Provenance | None = None) -> Proposal:
    """Validate a plan, commit it as a proposal branch and render its PR description;
    ``provenance``: the models that made it, in its trailers and description."""
    if not plan.items:
        raise InvalidInputError("the merged plan changes nothing")
    blobs: dict[str, str | None] = {}
    rows = []
    records = prediction_record(repo)
    for item in plan.items:
        path = repo.path_of(item.name)
        current = snapshot.get(item.name)
        if item.after is not None:
            check_experience(item.after, path, item.name, repo.settings.token_budget)
            blobs[path] = repo.git.write_blob(item.after.encode())
        elif current is None:
            raise InvalidInputError(f"plan deletes {item.name!r}, which does not exist")
        else:
            blobs[path] = None
        change = FileChange(item.name, path, current.blob if current else None, blobs[path],
                            current.text if current else "", item.after or "")
        added, removed = change.counts
        record = item_record(records, item.name, item.gradients)
        rows.append({"name": item.name, "operation": change.operation, "added": added,
                     "removed": removed, "confidence": item.confidence,
                     "shown_confidence": shown_confidence(item.confidence, record),
                     "record": record,
                     "rationale": item.rationale, "evidence": item.evidence,
                     "diff": hunks(change.diff), "fence": _fence(change.diff)})
    # deleting a skill deletes its whole folder
    tree = experience_tree(repo, repo.git.read_commit(main).tree, {
        p if b is not None else repo.layout.unit_of(repo.name_of(p) or ""): b
        for p, b in blobs.items()})
    predicted = [read_prediction(g.extra_trailers) for g in gradients]
    description = templates.render(
        "proposal.md.j2", repo, base=main, main_branch=repo.settings.main_branch,
        gradients=list(gradients), merger=merger_name, items=rows, provenance=provenance,
        predictions={g.id: p.describe() for g, p in zip(gradients, predicted, strict=True)})
    message = tr.Message(_subject(plan.items), description,
                         tuple((tr.GRADIENT, g.commit) for g in gradients)
                         + tuple(dict.fromkeys(t for p in predicted for t in p.trailers()))
                         + (provenance.trailers() if provenance is not None else ()))
    commit = repo.git.write_commit(tree, [main], message.render())
    ref = PROPOSALS + commit[:ID_LEN]
    if repo.git.ref(ref) != commit:
        repo.git.update_refs([RefUpdate(ref, commit, None)], "expgit merge")
    if pr_body is not None:
        pr_body.write_text(f"{message.subject}\n\n{description}")
    return load_proposal(repo, commit, "open", NOTHING_APPLIED)


def annotate_proposal(repo: ExperienceRepository, proposal: Proposal, evidence: str,
                      *, pr_body: Path | None = None,
                      trailers: Sequence[tuple[str, str]] = ()) -> Proposal:
    """The proposal with ``evidence`` (markdown) appended to its description: a new commit
    of the same tree, parent, author and trailers (``Expgit-Gradient`` kept, ``trailers``
    added), its branch made and the draft's removed in one compare-and-swap transaction.
    The draft commit stays unreferenced. Its id changes (an id is its commit's)."""
    info = repo.git.read_commit(proposal.commit)
    msg = tr.parse_message(info.message)
    body = f"{msg.body.rstrip()}\n\n{evidence.strip()}\n"
    message = tr.Message(msg.subject, body, msg.trailers + tuple(trailers))
    commit = repo.git.write_commit(info.tree, list(info.parents), message.render(),
                                   author=info.author_line)
    if commit != proposal.commit:
        old_ref, new_ref = PROPOSALS + proposal.id, PROPOSALS + commit[:ID_LEN]
        repo.git.update_refs([RefUpdate(new_ref, commit, None),
                              RefUpdate(old_ref, None, proposal.commit)],
                             "expgit train: the measured effect in the description")
    if pr_body is not None:
        pr_body.write_text(f"{message.subject}\n\n{body}")
    return load_proposal(repo, commit, "open", NOTHING_APPLIED)
