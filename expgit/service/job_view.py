"""A job as the service answers it: its status and pointers, and, once it is finished,
its result read back from git at those pointers (trajectory document, gradient commits,
proposal ref). Synchronous git reads: call it in a worker thread.

An object that is gone from the repository (deleted by hand, garbage-collected) is an
error line in the answer, never a failed request.
"""

from __future__ import annotations

from expgit.core.domain import SemanticGradient, Trajectory
from expgit.errors import ExpgitError
from expgit.remote.training_protocol import TrainingJob, TrainingJobResult
from expgit.service.jobs import Job, JobPointers
from expgit.store.refnames import PROPOSAL_STATES, find_by_id
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import find_gradient
from expgit.train.components.gradient_estimator import to_semantic
from expgit.train.records.trajectory_store import TrajectoryStore


def job_status(job: Job) -> TrainingJob:
    """The job without reading git (queued and running jobs, and the 202 answer)."""
    return TrainingJob.model_validate(job, from_attributes=True)  # its own errors list


def job_view(repo: ExperienceRepository, job: Job) -> TrainingJob:
    """The job; finished: with its result read from git."""
    view = job_status(job)
    pointers = job.pointers
    if not job.finished or pointers is None:
        return view
    problems: list[str] = []
    trajectory = _trajectory(repo, pointers.trajectory, problems)
    gradients: list[SemanticGradient] = []
    for pointer in pointers.gradients:
        view.gradient_ids.append(pointer.gradient_id)
        try:
            gradient = find_gradient(repo, pointer.gradient_id)
        except ExpgitError as exc:
            problems.append(f"gradient {pointer.gradient_id}: {exc.message}")
            continue
        view.gradient_refs.append(gradient.ref)
        uris = list(pointer.evidence_trajectory_uris)
        gradients.append(to_semantic(gradient, uris[0] if uris else "").model_copy(
            update={"evidence_trajectory_uris": uris}))
    applied = pointers.apply_result
    if applied is not None:
        view.applied_commit = applied.applied_commit
        view.proposal_id = applied.proposal_id
        if applied.proposal_id:
            try:
                state, _ = find_by_id(repo, PROPOSAL_STATES, applied.proposal_id,
                                      "proposal", "list them with `expgit proposals`")
                view.proposal_ref = PROPOSAL_STATES[state] + applied.proposal_id
            except ExpgitError as exc:
                problems.append(f"proposal {applied.proposal_id}: {exc.message}")
    view.trajectory_uri = pointers.trajectory.uri if pointers.trajectory else None
    view.errors += problems
    view.result = _result(pointers, trajectory, gradients)
    return view


def _trajectory(repo: ExperienceRepository, pointer: Trajectory | None,
                problems: list[str]) -> Trajectory | None:
    if pointer is None:
        return None
    try:
        content = TrajectoryStore(repo).read(pointer.uri)
    except ExpgitError as exc:
        problems.append(f"trajectory {pointer.uri}: {exc.message}")
        return None
    return pointer.model_copy(update={"content": content})


def _result(pointers: JobPointers, trajectory: Trajectory | None,
            gradients: list[SemanticGradient]) -> TrainingJobResult:
    return TrainingJobResult(evaluation=pointers.evaluation,
                             analysis_metadata=pointers.analysis_metadata,
                             trajectory=trajectory, gradients=gradients, plan=pointers.plan,
                             apply_result=pointers.apply_result)
