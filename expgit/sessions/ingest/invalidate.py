"""Invalidation: when trained session segments are superseded, the edits their gradients
made on ``main`` are proposed for reverting, for review; ``main`` itself never moves.

The link from a segment to its gradients is the evidence trailer: a segment is trained
as a rollout whose trajectory (content-addressed on the trajectories branch) is what
every gradient estimated from it cites in ``Expgit-Evidence``; the segment record keeps
that trajectory URI (and the trajectory names the case ``session-<fingerprint>``).

For each gradient citing a superseded segment:

* applied (its edit reached ``main`` through a proposal): the proposal's change of that
  experience is reverted against current ``main`` (restored, or three-way merged when
  ``main`` changed it since, as ``expgit revert`` does); each reverted experience becomes
  a gradient with the trailer ``Expgit-Invalidates: <fingerprint>`` and they are merged
  into one invalidation proposal;
* still open: nothing is on ``main`` to revert; it is listed (``open_gradient_ids``) so
  a reviewer can reject it.
"""

from __future__ import annotations

from collections.abc import Sequence

from expgit.errors import ConflictError, ExpgitError
from expgit.sessions.manifest import InvalidationRecord, SegmentRecord
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.changes import FileChange
from expgit.store.workflow.gradients import Gradient, GradientRequest, list_gradients, propose
from expgit.store.workflow.proposals import list_proposals, merge
from expgit.store.workflow.revert import reverted_blob

INVALIDATES = "Expgit-Invalidates"


def citing_gradients(repo: ExperienceRepository, uris: set[str]) -> list[Gradient]:
    """The open and applied gradients whose evidence cites one of ``uris`` (invalidation
    gradients themselves excluded)."""
    return [g for g in list_gradients(repo, ("open", "applied"))
            if uris & set(g.evidence)
            and not any(k == INVALIDATES for k, _ in g.extra_trailers)]


def _applied_changes(repo: ExperienceRepository, gradients: Sequence[Gradient]
                     ) -> dict[str, list[FileChange]]:
    """For each experience the gradients target, the changes of it made by the applied
    proposals that carried them, newest first."""
    wanted = {g.commit: g.target for g in gradients}
    found: dict[str, list[FileChange]] = {}
    for proposal in sorted(list_proposals(repo, ("applied",)), key=lambda p: -p.time):
        targets = {wanted[c] for c in proposal.gradient_commits if c in wanted}
        for change in proposal.changes:
            if change.name in targets:
                found.setdefault(change.name, []).append(change)
    return found


def _revert_request(repo: ExperienceRepository, name: str, changes: list[FileChange],
                    fingerprints: list[str], gradient_ids: list[str]) -> GradientRequest | None:
    """The gradient that undoes ``changes`` of ``name`` on current ``main``; None when
    ``main`` already has it undone."""
    entry = repo.snapshot().get(name)
    current = entry.blob if entry is not None else None
    blob = current
    for change in changes:  # newest first, as a reviewer would revert them
        blob, _ = reverted_blob(repo.git, change, blob)
    if blob == current:
        return None
    rationale = (f"Invalidation: the session segment(s) {', '.join(fingerprints)} this "
                 f"edit was learned from changed (the session grew or was edited) and "
                 f"were superseded; this reverts the edits of gradient(s) "
                 f"{', '.join(gradient_ids)} until the new segments are trained.")
    if blob is None:
        return GradientRequest(name=name, delete=True, rationale=rationale, confidence=0.5)
    text = repo.git.read_blob(blob).decode("utf-8", "replace")
    return GradientRequest(name=name, content=text, rationale=rationale, confidence=0.5)


def invalidate_segments(repo: ExperienceRepository, segments: Sequence[SegmentRecord]
                        ) -> InvalidationRecord | None:
    """Propose reverting what the gradients citing ``segments`` did on ``main``; None
    when no gradient cites them. Failures are recorded in ``notes``, never raised."""
    uris = {s.trajectory_uri for s in segments if s.trajectory_uri}
    if not uris:
        return None
    citing = citing_gradients(repo, uris)
    if not citing:
        return None
    fingerprints = [s.fingerprint for s in segments]
    record = InvalidationRecord(open_gradient_ids=[g.id for g in citing if g.state == "open"])
    if record.open_gradient_ids:
        record.notes.append("open gradients cite the superseded segment(s); reject them "
                            "with `expgit reject` (nothing of theirs is on main)")
    applied = [g for g in citing if g.state == "applied"]
    if not applied:
        return record
    made: list[str] = []
    for name, changes in sorted(_applied_changes(repo, applied).items()):
        ids = [g.id for g in applied if g.target == name]
        try:
            request = _revert_request(repo, name, changes, fingerprints, ids)
            if request is None:
                record.notes.append(f"{name}: already undone on main")
                continue
            gradient = propose(repo, request,
                               [(INVALIDATES, fp) for fp in fingerprints])
        except ConflictError as exc:
            record.notes.append(f"{name}: cannot be reverted automatically: {exc.message}")
            continue
        except ExpgitError as exc:
            record.notes.append(f"{name}: {exc.message}")
            continue
        made.append(gradient.id)
        record.reverted_gradient_ids += ids
    if made:
        try:
            record.proposal_id = merge(repo, made).id
        except ExpgitError as exc:
            record.notes.append(f"the invalidation gradients {', '.join(made)} could not "
                                f"be merged into a proposal: {exc.message}")
    return record
