"""The evidence behind an edit, for a reviewer: ``expgit evidence ID``.

ID is a gradient, a proposal or a trajectory (a unique prefix of its id, at least 4 hex
digits, or a trajectory's URI). The chain, read from git only:

* each edit (one for a gradient, each of its gradients for a proposal): its rationale,
  the stated confidence and the one shown (:func:`expgit.store.derived.predictions.
  shown_confidence`), its proposing model, its prediction and the verdict the candidate
  eval gave it, its diff;
* each trajectory it cites: the analysis (title, outcome, the document), the
  evaluation per criterion, and the transcript with its tool calls and their results
  (:mod:`expgit.train.records.transcript`), or a note that it was stored before transcripts
  were kept.

An unknown id is a NotFoundError, an ambiguous one an InvalidInputError listing the
candidates (both exit 5).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from expgit.core.domain import RubricEvaluation
from expgit.errors import InvalidInputError, NotFoundError
from expgit.store.derived.predictions import (
    PredictionRecords,
    TrackRecord,
    prediction_record,
    read_prediction,
    shown_confidence,
    trainer_model,
)
from expgit.store.refnames import GRADIENT_STATES, PROPOSAL_STATES
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import Gradient, find_gradient
from expgit.store.workflow.proposals import find_proposal
from expgit.train.components.llm_fields import without_front_matter
from expgit.train.components.trajectory_analyzer import read_front_matter
from expgit.train.records.trajectory_store import ID_LEN as TRAJECTORY_ID_LEN
from expgit.train.records.trajectory_store import TrajectoryStore
from expgit.train.records.transcript import Transcript, read_transcript

NO_TRANSCRIPT = ("no transcript: this trajectory was stored before expgit kept "
                 "transcripts; only the model's analysis of the run is shown")
HINT = "list them with `expgit gradients --state all`, `expgit proposals --state all`"


class TrajectoryEvidence(BaseModel):
    id: str
    uri: str
    title: str = ""
    outcome: str = ""
    case: str = ""
    task_signature: str = ""
    analysis: str = ""  # the stored document after its front matter
    evaluation: RubricEvaluation | None = None
    transcript: Transcript | None = None
    note: str | None = None  # why something is missing


class EditEvidence(BaseModel):
    id: str
    commit: str
    state: str
    target: str
    operation: str
    rationale: str
    confidence: float  # as the model stated it (stored)
    shown_confidence: float  # times the track record's factor
    model: str | None = None
    track_record: dict[str, Any] = Field(default_factory=dict)
    predicts: dict[str, list[str]] = Field(default_factory=dict)
    verdict: str | None = None  # the candidate eval's check of the prediction, if any
    diff: str = ""
    trajectories: list[TrajectoryEvidence] = Field(default_factory=list)


class Evidence(BaseModel):
    kind: Literal["gradient", "proposal", "trajectory"]
    id: str
    state: str | None = None
    subject: str = ""
    edits: list[EditEvidence] = Field(default_factory=list)
    trajectory: TrajectoryEvidence | None = None
    missing: list[str] = Field(default_factory=list)  # gradients that cannot be read


def _matches(repo: ExperienceRepository, store: TrajectoryStore, wanted: str
             ) -> list[tuple[str, str]]:
    """``(kind, id)`` of every gradient, proposal and trajectory whose id starts with
    ``wanted``, each once."""
    found: dict[tuple[str, str], None] = {}
    for kind, states, length in (("gradient", GRADIENT_STATES, 12),
                                 ("proposal", PROPOSAL_STATES, 12)):
        key = wanted[:length]
        for prefix in states.values():
            for ref in repo.git.refs(prefix):
                if ref[len(prefix):].startswith(key):
                    found.setdefault((kind, ref[len(prefix):]))
    key = wanted[:TRAJECTORY_ID_LEN]
    for tid in store.ids():
        if tid.startswith(key):
            found.setdefault(("trajectory", tid))
    return list(found)


def resolve(repo: ExperienceRepository, given: str) -> tuple[str, str]:
    """``(kind, id)`` of what ``given`` names (see the module docstring)."""
    store = TrajectoryStore(repo)
    text = given.strip()
    if ":" in text:  # a trajectory's URI, as a gradient's evidence names it
        store.read(text)  # NotFoundError if it names nothing
        return "trajectory", text
    wanted = text.lower()
    if len(wanted) < 4 or any(c not in "0123456789abcdef" for c in wanted):
        raise InvalidInputError(f"{given!r} is not a gradient, proposal or trajectory id "
                                "(at least 4 hex digits)", hint=HINT)
    matches = _matches(repo, store, wanted)
    if not matches:
        raise NotFoundError(f"no gradient, proposal or trajectory {given!r}", hint=HINT)
    if len(matches) > 1:
        listed = ", ".join(f"{kind} {mid}" for kind, mid in sorted(matches))
        raise InvalidInputError(f"id {given!r} is ambiguous: {listed}; give more digits")
    return matches[0]


def trajectory_evidence(store: TrajectoryStore, uri: str) -> TrajectoryEvidence:
    """The stored analysis, evaluation and transcript of the trajectory at ``uri``; what
    cannot be read is said in ``note``."""
    tid = uri.rpartition("/")[2].removesuffix(".md")
    try:
        document = store.read(uri)
    except InvalidInputError as exc:  # NotFoundError too: the evidence names a lost one
        return TrajectoryEvidence(id=tid, uri=uri, note=exc.message)
    front = read_front_matter(document, uri)
    evaluation = front.get("evaluation")
    found = TrajectoryEvidence(
        id=tid, uri=uri, title=str(front.get("title") or ""),
        outcome=str(front.get("outcome") or ""), case=str(front.get("case") or ""),
        task_signature=str(front.get("task_signature") or ""),
        analysis=without_front_matter(document).strip("\n") + "\n",
        evaluation=RubricEvaluation.model_validate(evaluation)
        if isinstance(evaluation, dict) else None)
    data = store.transcript_of(uri)
    if data is None:
        found.note = NO_TRANSCRIPT
    else:
        found.transcript = read_transcript(data, f"the transcript of {uri}")
    return found


def _edit(repo: ExperienceRepository, store: TrajectoryStore, gradient: Gradient,
          records: PredictionRecords) -> EditEvidence:
    model = trainer_model(gradient.extra_trailers)
    record = records.of(gradient.target, model)
    predicts = read_prediction(gradient.extra_trailers)
    return EditEvidence(
        id=gradient.id, commit=gradient.commit, state=gradient.state,
        target=gradient.target, operation=gradient.operation, rationale=gradient.rationale,
        confidence=gradient.confidence,
        shown_confidence=shown_confidence(gradient.confidence, record), model=model,
        track_record=record_view(record),
        predicts={"cases": list(predicts.cases), "tasks": list(predicts.tasks)},
        verdict=records.verdicts.get(gradient.commit), diff=gradient.change.diff,
        trajectories=[trajectory_evidence(store, uri) for uri in gradient.evidence])


def record_view(record: TrackRecord) -> dict[str, Any]:
    return record.as_dict() | {"factor": round(record.factor, 4)}


def evidence(repo: ExperienceRepository, given: str) -> Evidence:
    """The chain behind ``given`` (a gradient, proposal or trajectory id or URI)."""
    kind, found = resolve(repo, given)
    store = TrajectoryStore(repo)
    if kind == "trajectory":
        uri = found if ":" in found else store.uri_of(found)
        alone = trajectory_evidence(store, uri)
        return Evidence(kind="trajectory", id=alone.id, subject=alone.title, trajectory=alone)
    records = prediction_record(repo)
    if kind == "gradient":
        gradient = find_gradient(repo, found)
        return Evidence(kind="gradient", id=gradient.id, state=gradient.state,
                        subject=f"gradient: {gradient.operation} {gradient.target}",
                        edits=[_edit(repo, store, gradient, records)])
    proposal = find_proposal(repo, found)
    shown = Evidence(kind="proposal", id=proposal.id, state=proposal.state,
                     subject=proposal.subject)
    for sha in proposal.gradient_commits:
        try:
            shown.edits.append(_edit(repo, store, find_gradient(repo, sha), records))
        except InvalidInputError as exc:  # its ref is gone (pruned by hand)
            shown.missing.append(f"gradient {sha[:12]}: {exc.message}")
    return shown
