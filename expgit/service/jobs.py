"""The training service's job registry: in memory, because a job's *status* is transient.

What a job produced is in git; a finished job keeps only the names of those objects
(:class:`JobPointers`: trajectory URI, gradient ids, the apply result's proposal id or
commit) plus small facts that are not contents (the evaluation, plan items without their
contents). A restarted service knows no job (404), yet loses nothing durable.

Bounded: at most ``capacity`` unfinished jobs (more is refused: :class:`QueueFullError`)
and the ``keep_finished`` most recent finished jobs.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from expgit.core.domain import (
    AnalysisNotes,
    PolicyApplyResult,
    PolicyUpdatePlan,
    RolloutTrainingResult,
    RubricEvaluation,
    Trajectory,
)
from expgit.errors import ExpgitError, UsageError
from expgit.remote.training_protocol import FINISHED, JobState


class QueueFullError(ExpgitError):
    """The service has as many unfinished jobs as it accepts; retry later."""


@dataclass(frozen=True)
class GradientPointer:
    gradient_id: str
    evidence_trajectory_uris: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobPointers:
    """A finished job's share of the training, by name: contents stay in git."""

    evaluation: RubricEvaluation | None = None
    analysis_metadata: AnalysisNotes = field(default_factory=AnalysisNotes)
    trajectory: Trajectory | None = None  # without its content (read at trajectory.uri)
    gradients: tuple[GradientPointer, ...] = ()
    plan: PolicyUpdatePlan | None = None  # items without contents (in the proposal)
    apply_result: PolicyApplyResult | None = None

    @classmethod
    def of(cls, result: RolloutTrainingResult) -> JobPointers:
        analysis = result.analyses[0] if result.analyses else None
        trajectory = analysis.trajectory if analysis is not None else None
        plan = result.plan
        return cls(
            evaluation=analysis.evaluation if analysis is not None else None,
            analysis_metadata=(analysis.metadata.model_copy(deep=True) if analysis is not None
                               else AnalysisNotes()),
            trajectory=trajectory.model_copy(update={"content": ""}) if trajectory else None,
            gradients=tuple(GradientPointer(g.gradient_id, tuple(g.evidence_trajectory_uris))
                            for g in result.gradients if g.gradient_id),
            plan=plan.model_copy(update={"items": [
                i.model_copy(update={"before_content": None, "after_content": None})
                for i in plan.items]}) if plan is not None else None,
            apply_result=result.apply_result)


@dataclass
class Job:
    job_id: str
    key: str  # the rollout's content id: the same rollout in flight is the same job
    case_name: str
    created_at: float
    updated_at: float
    status: JobState = "queued"
    errors: list[str] = field(default_factory=list)
    pointers: JobPointers | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class JobRegistry:
    """Jobs by id, on the event loop's thread (no locking needed)."""

    def __init__(self, *, capacity: int, keep_finished: int = 1000) -> None:
        if capacity < 1 or keep_finished < 0:
            raise UsageError("the job registry needs capacity >= 1 and keep_finished >= 0")
        self.capacity = capacity
        self.keep_finished = keep_finished
        self._jobs: dict[str, Job] = {}
        self._unfinished_by_key: dict[str, Job] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()

    def open(self, key: str, case_name: str) -> tuple[Job, bool]:
        """The unfinished job of the same rollout (False), or a new queued job (True);
        QueueFullError when ``capacity`` jobs are unfinished."""
        same = self._unfinished_by_key.get(key)
        if same is not None:
            return same, False
        if len(self._unfinished_by_key) >= self.capacity:
            raise QueueFullError(f"the training service has {self.capacity} unfinished "
                                 "jobs, its limit", hint="retry later")
        now = time.time()
        job = Job(job_id=f"train_job_{secrets.token_hex(8)}", key=key, case_name=case_name,
                  created_at=now, updated_at=now)
        self._jobs[job.job_id] = job
        self._unfinished_by_key[key] = job
        return job, True

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def mark_running(self, job: Job) -> None:
        if job.status == "queued":
            job.status, job.updated_at = "running", time.time()

    def finish(self, job: Job, pointers: JobPointers | None, errors: list[str]) -> None:
        """``completed`` without errors, else ``failed``; forget the oldest finished jobs
        beyond ``keep_finished``."""
        if job.finished:
            return
        job.pointers, job.errors = pointers, list(errors)
        job.status = "failed" if errors else "completed"
        job.updated_at = time.time()
        if self._unfinished_by_key.get(job.key) is job:
            del self._unfinished_by_key[job.key]
        self._finished[job.job_id] = None
        while len(self._finished) > self.keep_finished:
            old, _ = self._finished.popitem(last=False)
            self._jobs.pop(old, None)

    def counts(self) -> dict[str, int]:
        return {"queued": 0, "running": 0, "completed": 0, "failed": 0} | Counter(
            job.status for job in self._jobs.values())
