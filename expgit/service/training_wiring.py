"""The training service's trainer: the default components of ``expgit train`` (trajectory
analyzer, gradient estimator or both in one reflector, patch-merge optimizer, git updater,
all on one LLM) in a StreamingPolicyTrainer, with the LLM stages bounded by the service's
StageGate.
Batching (``max_gradients_per_update``, ``max_wait_seconds``) from ``[train]``; with a
``publisher`` (``--remote``), each update is pushed to its remote."""

from __future__ import annotations

from collections.abc import Callable

from expgit.errors import UsageError
from expgit.runs.provenance import of_handles
from expgit.runs.wiring import LLMHandles, build_pipeline
from expgit.service.stage_gate import (
    GatedAnalyzer,
    GatedEstimator,
    GatedReflector,
    StageGate,
)
from expgit.store.format.provenance import UNKNOWN
from expgit.store.repository import ExperienceRepository
from expgit.train.components.policy_trainer import BatchPolicyTrainer
from expgit.train.components.streaming import StreamingPolicyTrainer
from expgit.train.remote_push import RemotePublisher

# (repository, the opened LLM or None, the stage gate) -> the service's trainer
TrainerFactory = Callable[[ExperienceRepository, LLMHandles | None, StageGate],
                          StreamingPolicyTrainer]


def streaming_trainer_factory(*, max_gradients_per_update: int | None = None,
                              max_wait_seconds: float | None = None,
                              timer_check_interval_seconds: float = 0.5,
                              publisher: RemotePublisher | None = None) -> TrainerFactory:
    """A factory of the default streaming trainer; None: the repository's ``[train]``."""

    def make(repo: ExperienceRepository, llm: LLMHandles | None, gate: StageGate
             ) -> StreamingPolicyTrainer:
        if llm is None:
            raise UsageError("the default training components need an LLM")
        # the components of the batch chain, reused as they are (one wiring for both)
        # the rollouts are submitted: their agent is the client's, unknown here
        made_by = of_handles(llm, f"{UNKNOWN} (submitted rollouts)")
        batch = build_pipeline(repo, llm, concurrency=gate.limit, publisher=publisher,
                               provenance=made_by).trainer
        if not isinstance(batch, BatchPolicyTrainer):
            raise UsageError("build_pipeline no longer makes a BatchPolicyTrainer")
        train = repo.settings.train
        return StreamingPolicyTrainer(
            GatedAnalyzer(batch.analyzer, gate), GatedEstimator(batch.estimator, gate),
            batch.engine,
            max_gradients_per_update=max_gradients_per_update
            or train.max_gradients_per_update,
            max_wait_seconds=max_wait_seconds or train.max_wait_seconds,
            timer_check_interval_seconds=min(timer_check_interval_seconds,
                                             max_wait_seconds or train.max_wait_seconds),
            concurrency=gate.limit,
            reflector=None if batch.reflector is None
            else GatedReflector(batch.reflector, gate))

    return make
