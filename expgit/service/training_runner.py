"""The training service's engine room: one StreamingPolicyTrainer, one task per job.

``submit`` registers a job for a rollout and starts a task that hands the rollout to the
trainer (``submit_rollout``: analyse, estimate, wait for the batch's plan-and-apply) and
records the job's pointers. ``shutdown`` refuses new jobs, lets the running ones finish
(flushing their batches at once) for up to ``grace_seconds``, then stops the rest and
closes the trainer.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

from expgit.core.domain import Rollout
from expgit.core.redaction.messages import Redactor
from expgit.errors import UsageError
from expgit.service.jobs import Job, JobPointers, JobRegistry
from expgit.service.stage_gate import ON_SLOT, GatedAnalyzer
from expgit.store.repository import ExperienceRepository
from expgit.train.components.policy_trainer import describe
from expgit.train.components.streaming import StreamingPolicyTrainer
from expgit.train.context import PipelineContext
from expgit.train.records.trajectory_store import rollout_id

Mode = Literal["propose", "apply"]
CLOSE_SECONDS = 1.0  # at least this long for the trainer to close after the grace


class ShuttingDownError(UsageError):
    """The service is stopping and takes no new job."""


class TrainingRunner:
    """Runs the jobs of one service on one trainer; lives on the service's event loop."""

    def __init__(self, repo: ExperienceRepository, trainer: StreamingPolicyTrainer,
                 registry: JobRegistry, mode: Mode) -> None:
        self.repo = repo
        self.trainer = trainer
        self.registry = registry
        self.mode: Mode = mode
        # gated stages mark their jobs running when they get a slot; else: at once
        self.gated = isinstance(trainer.analyzer, GatedAnalyzer)
        self.closing = False
        self.redactor = Redactor(repo.settings.limits.max_message_chars)
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def submit(self, rollout: Rollout) -> tuple[Job, bool]:
        """The job training ``rollout`` (True: new; False: the same rollout is in flight).
        Raises QueueFullError, ShuttingDownError."""
        if self.closing:
            raise ShuttingDownError("the training service is shutting down",
                                    hint="submit to the service once it is back")
        rollout = self.redactor.model(rollout)  # before any prompt or object sees it
        job, created = self.registry.open(rollout_id(rollout), rollout.case.name)
        if created:
            task = asyncio.get_running_loop().create_task(
                self._run(job, rollout), name=f"expgit {job.job_id}")
            self._tasks[job.job_id] = task
            task.add_done_callback(lambda _: self._tasks.pop(job.job_id, None))
        return job, created

    async def _run(self, job: Job, rollout: Rollout) -> None:
        ON_SLOT.set(lambda: self.registry.mark_running(job))  # this task's context only
        if not self.gated:
            self.registry.mark_running(job)
        context = PipelineContext(mode=self.mode)
        try:
            result = await self.trainer.submit_rollout(rollout, context)
        except asyncio.CancelledError:
            self.registry.finish(job, None, [f"case {job.case_name}: the training service "
                                             "stopped before this job finished"])
            raise
        except Exception as exc:  # one job's failure never stops the service
            self.registry.finish(job, None, [f"case {job.case_name}: training failed: "
                                             f"{describe(exc)}"])
            return
        self.registry.finish(job, JobPointers.of(result), result.errors)

    async def shutdown(self, grace_seconds: float) -> None:
        self.closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        while self._tasks and loop.time() < deadline:
            with contextlib.suppress(Exception):  # a failed batch is its jobs' business
                await asyncio.wait_for(self.trainer.flush(), max(deadline - loop.time(), 0))
            if self._tasks:  # the flush may have finished every job
                await asyncio.wait(list(self._tasks.values()),
                                   timeout=min(0.05, max(deadline - loop.time(), 0)))
        for task in list(self._tasks.values()):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()))
        # a batch stuck in its update (a model that never answers) must not hold the
        # shutdown: its jobs are already failed above
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.trainer.close(),
                                   max(deadline - loop.time(), CLOSE_SECONDS))
