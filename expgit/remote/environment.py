"""An environment service as ``expgit train --env-url`` / ``expgit eval --env-url`` use it:
check it is up (``GET /health``), fetch the cases of a split, run rollouts there.

The cases of a split are fetched whole (every page) before any model is started, so an
unknown split or a down service fails the run before it costs anything; the run then
batches them exactly as it batches a cases file's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from expgit.core.domain import Case, Rollout, RolloutAnalysis, RolloutTrainingResult
from expgit.errors import UsageError
from expgit.remote.case_loader import RemoteCaseLoader
from expgit.remote.http import preflight
from expgit.remote.protocol import Health
from expgit.remote.rollout_executor import RemoteRolloutExecutor
from expgit.store.derived.snapshot import Snapshot
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext

PAGE_SIZE = 100


@dataclass(frozen=True)
class EnvironmentService:
    """Where the service is and how to reach it; ``dataset``/``domain`` None: the
    service's own (it decides what an unqualified query means)."""

    url: str
    token: str | None = None
    dataset: str | None = None
    domain: str | None = None
    transport: httpx.AsyncBaseTransport | None = field(default=None, compare=False)

    async def check(self) -> Health:
        """``GET /health``; raises ExpgitError with the URL when the service is not up."""
        return await preflight(self.url, token=self.token, transport=self.transport)

    def cases(self, split: str, filters: dict[str, Any] | None = None) -> RemoteCases:
        return RemoteCases(self, split, dict(filters or {}))

    def executor(self, repo: ExperienceRepository, *, max_in_flight: int
                 ) -> RemoteRolloutExecutor:
        """Rollouts run by the service against ``repo`` (its absolute path is the
        ``policy_set.root_uri``; the snapshot's commit goes in its metadata)."""
        where = repo.git.work_tree or repo.git.git_dir
        return RemoteRolloutExecutor(self.url, repo_uri=str(where), token=self.token,
                                     transport=self.transport, max_in_flight=max_in_flight)


@dataclass(frozen=True)
class RemoteCases:
    """The cases of one split of an environment service, instead of a cases file."""

    service: EnvironmentService
    split: str
    filters: dict[str, Any] = field(default_factory=dict)

    async def load(self) -> list[Case]:
        """Every case of the split, all pages, in the service's order (ExpgitError if
        the service refuses the query or has no such cases)."""
        return await RemoteCaseLoader(
            self.service.url, dataset=self.service.dataset, domain=self.service.domain,
            split=self.split, limit=PAGE_SIZE, filters=self.filters,
            token=self.service.token, transport=self.service.transport).load()


class NoTrainer:
    """The trainer of an eval-only pipeline (a remote eval starts no model): never called."""

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: Snapshot,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult:
        raise UsageError("this pipeline only evaluates; it has no trainer")
