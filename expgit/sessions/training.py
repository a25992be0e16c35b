"""Training memory-eligible session segments through the pipeline's
``train_from_rollouts``, and recording what came of it in their manifests.

A segment counts as trained once its rollout went through analysis and estimation
without an error naming its case (an estimator may well propose no edit); a segment
whose analysis or estimation failed stays untrained and is tried again next run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from expgit.core.domain import Rollout, RolloutTrainingResult
from expgit.runs.wiring import LLMHandles, build_pipeline
from expgit.sessions.manifest import SegmentRecord, SessionManifest
from expgit.sessions.report import SessionsRunReport
from expgit.sessions.rollouts import case_name, evidence_uri, segment_rollout
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext
from expgit.train.measurement.phase_metrics import apply_results_of


def candidates(manifests: list[SessionManifest]
               ) -> list[tuple[SessionManifest, SegmentRecord]]:
    """The settled, labelled, memory-eligible segments not trained yet."""
    return [(m, s) for m in manifests for s in m.settled()
            if s.labelled and s.memory_eligible and not s.trained]


def _case_errors(result: RolloutTrainingResult, name: str) -> list[str]:
    return [e for e in result.errors if e.startswith(f"case {name}:")]


async def train_segments(repo: ExperienceRepository, store: SessionStore, llm: LLMHandles,
                         *, batch_size: int, mode: Literal["propose", "apply"],
                         concurrency: int, report: SessionsRunReport,
                         progress: Callable[[str], None]) -> None:
    """Train up to ``batch_size`` segments in one ``train_from_rollouts`` call."""
    todo = candidates(await asyncio.to_thread(store.manifests))[:batch_size]
    if not todo:
        return
    threshold = repo.settings.sessions.memory_threshold
    rollouts: list[Rollout] = []
    for manifest, segment in todo:
        messages = await asyncio.to_thread(store.segment_messages, segment.fingerprint)
        rollouts.append(segment_rollout(manifest, segment, messages, threshold))
    progress(f"train: {len(rollouts)} segments")
    pipeline = build_pipeline(repo, llm, concurrency=concurrency)
    result = await pipeline.train_from_rollouts(rollouts, PipelineContext(mode=mode))
    proposals = [a.proposal_id for a in apply_results_of(result) if a.proposal_id]
    report.proposals += proposals
    report.errors += result.errors
    report.gradients += [g.gradient_id for g in result.gradients if g.gradient_id]
    patches: dict[str, list[Callable[[SessionManifest], None]]] = {}
    for (manifest, segment), rollout in zip(todo, rollouts, strict=True):
        uri = evidence_uri(repo, rollout)
        gradient_ids = [g.gradient_id for g in result.gradients
                        if g.gradient_id and uri in g.evidence_trajectory_uris]
        errors = _case_errors(result, case_name(segment.fingerprint))
        if not errors:
            report.trained.append(segment.fingerprint)
        patches.setdefault(manifest.session_key, []).append(_recorder(
            segment.fingerprint, uri, gradient_ids, proposals if gradient_ids else [],
            errors))
    commit = await asyncio.to_thread(store.patch, patches, "sessions: record training")
    report.commits += [commit] if commit else []


def _recorder(fingerprint: str, uri: str, gradient_ids: list[str], proposals: list[str],
              errors: list[str]) -> Callable[[SessionManifest], None]:
    def record(manifest: SessionManifest) -> None:
        for segment in manifest.segments:
            if segment.fingerprint != fingerprint or segment.status != "active":
                continue
            if errors:
                segment.last_error = errors[0]
                continue
            segment.trained = True
            segment.trajectory_uri = uri
            segment.gradient_ids = list(dict.fromkeys(segment.gradient_ids + gradient_ids))
            segment.proposal_ids = list(dict.fromkeys(segment.proposal_ids + proposals))
            segment.last_error = None
    return record

