"""PolicyTrainingEngine: the shared plan-and-apply kernel of every trainer
(docs/design.md, "One batch").

``plan_and_apply`` takes the repository lock, reloads the latest ``main``, plans and
applies, and releases the lock, so concurrent trainers (batch, streaming, other
processes) each plan on the ``main`` the previous one left. Analysis and estimation
happen before, outside the lock. The lock waits ``lock_wait_seconds`` (expgit.toml) and
then raises LockHeldError. Git work runs in a thread (:func:`asyncio.to_thread`), so the
event loop never waits for it. With a ``publisher`` (``--remote``), each update's
trajectories, gradients and proposal are pushed after the lock is released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from expgit.core.domain import PolicyApplyResult, PolicyUpdatePlan, SemanticGradient
from expgit.store.lock import RepoLock
from expgit.store.repository import ExperienceRepository
from expgit.train.components.policy_updater import set_ref
from expgit.train.context import PipelineContext
from expgit.train.interfaces import PolicyOptimizer, PolicyUpdater
from expgit.train.remote_push import RemotePublisher


class PolicyTrainingEngine:
    """Lock, reload ``main``, plan (optimizer), apply (updater), unlock."""

    def __init__(self, repo: ExperienceRepository, optimizer: PolicyOptimizer,
                 updater: PolicyUpdater, *, publisher: RemotePublisher | None = None
                 ) -> None:
        self.repo = repo
        self.optimizer = optimizer
        self.updater = updater
        self.publisher = publisher

    async def plan_and_apply(self, gradients: Sequence[SemanticGradient],
                             context: PipelineContext
                             ) -> tuple[PolicyUpdatePlan, PolicyApplyResult]:
        """No gradients: an empty plan and no change, without the lock or any call."""
        if not gradients:
            snapshot = await asyncio.to_thread(self.repo.snapshot)
            return PolicyUpdatePlan(), PolicyApplyResult(updated_policy_set=set_ref(snapshot))
        ids = [g.gradient_id for g in gradients]
        if self.publisher is not None:
            self.publisher.track(ids)  # pushed later even if this update fails
        lock = self.repo.lock(f"expgit train: update from {len(gradients)} gradients")
        await _acquire(lock)
        try:
            latest = await asyncio.to_thread(self.repo.snapshot)
            plan = await self.optimizer.plan(gradients, latest, context)
            result = await self.updater.apply(plan, latest, context)
        finally:
            lock.release()  # quick, and must run even when the task is being cancelled
        if self.publisher is not None:  # outside the lock: a push never holds it
            await asyncio.to_thread(self.publisher.after_update, ids, result.proposal_id)
        return plan, result


async def _acquire(lock: RepoLock) -> None:
    """Wait for the lock in a worker thread. If the waiting task is cancelled, the
    thread may still get the lock afterwards: it is then released at once."""
    waiting = asyncio.ensure_future(asyncio.to_thread(lock.acquire))
    try:
        await asyncio.shield(waiting)
    except asyncio.CancelledError:
        def release_if_taken(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is None:
                lock.release()

        waiting.add_done_callback(release_if_taken)
        raise
