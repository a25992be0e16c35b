"""``expgit sessions run``: segment, label and train whatever is pending (the trajectory
hub's scheduled task), each step at most ``batch_size`` items, each step one commit on
the sessions branch.

1. segment the pending sessions (their stored, redacted transcripts);
2. label the settled, unlabelled segments with the trajectory scorer (one call each);
   memory-eligible: overall >= ``[sessions] memory_threshold``, SFT-eligible: overall
   >= ``sft_threshold``. A segment with feedback events is labelled by them instead
   (:mod:`expgit.sessions.formats.feedback`; no call, even without an LLM): memory-eligible
   whatever its label, not SFT-eligible (``export-sft`` takes scored segments);
3. train the memory-eligible, untrained segments as rollouts through the pipeline's
   ``train_from_rollouts`` (propose mode by default: gradients and a proposal, ``main``
   unchanged) and record the trajectory, gradient and proposal ids in the manifests.

Without an LLM nothing is segmented, scored or trained (only segments with feedback are
labelled); the report says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from expgit.errors import ExpgitError, UsageError
from expgit.llm.port import LLMError
from expgit.outcomes.signals import SessionSignals
from expgit.runs.build import LLMOptions
from expgit.runs.wiring import LLMHandles
from expgit.sessions.formats.feedback import FeedbackLabel, label_segment, segment_signals
from expgit.sessions.ingest.command import segment_session
from expgit.sessions.ingest.segmenter import LLMTaskSegmenter, TaskSegmenter
from expgit.sessions.manifest import SessionManifest
from expgit.sessions.metrics import LLMTrajectoryScorer, SegmentMetrics, TrajectoryScorer
from expgit.sessions.report import SessionsRunReport
from expgit.sessions.status.counts import refresh_checkpoint
from expgit.sessions.store import SessionChanges, SessionStore
from expgit.sessions.training import train_segments
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import CHARS_PER_TOKEN
from expgit.train.reports.run_report import UsageReport

Progress = Callable[[str], None]
PROMPT_OVERHEAD_TOKENS = 500  # the segment template's instructions, estimated
MIN_WINDOW_TOKENS = 200


async def run(repo: ExperienceRepository, *, batch_size: int = 50,
              llm: LLMHandles | None, mode: Literal["propose", "apply"] = "propose",
              concurrency: int = 4, segmenter: TaskSegmenter | None = None,
              scorer: TrajectoryScorer | None = None, progress: Progress | None = None
              ) -> SessionsRunReport:
    """Segment, label and train (see the module docstring). ``segmenter`` and ``scorer``
    default to the LLM ones; ``llm`` None: nothing is done but reporting."""
    store = SessionStore(repo)
    report = SessionsRunReport(branch=store.branch.branch, llm=llm is not None)
    report.main_before = await asyncio.to_thread(repo.main_commit)
    prompt_tokens = llm.prompt_tokens if llm is not None else None
    if llm is not None:
        segmenter = segmenter or LLMTaskSegmenter(
            llm.structured, window_budget(repo.settings.sessions.window_tokens,
                                          prompt_tokens), repo)
        scorer = scorer or LLMTrajectoryScorer(llm.structured, repo,
                                               prompt_tokens=prompt_tokens)
    say = progress or (lambda _: None)
    await _segment(repo, store, segmenter, batch_size, report, say)
    by_feedback = await _label(repo, store, scorer, batch_size, concurrency, report, say)
    if llm is not None:
        await train_segments(repo, store, llm, batch_size=batch_size, mode=mode,
                             concurrency=concurrency, report=report, progress=say)
    else:
        report.notes.append("no LLM: nothing was segmented, scored or trained"
                            + (f" ({by_feedback} segment(s) labelled by their feedback)"
                               if by_feedback else ""))
    report.main_after = await asyncio.to_thread(repo.main_commit)
    await asyncio.to_thread(refresh_checkpoint, repo)
    return report


async def _segment(repo: ExperienceRepository, store: SessionStore,
                   segmenter: TaskSegmenter | None, batch_size: int,
                   report: SessionsRunReport, say: Progress) -> None:
    entries = await asyncio.to_thread(store.manifest_entries)
    pending = [(m, base) for m, base in entries if m.status == "pending"]
    if segmenter is None:
        report.pending = {m.session_key: m.status_reason or "" for m, _ in pending}
        return
    changes = SessionChanges()
    for number, (manifest, base) in enumerate(pending[:batch_size], start=1):
        say(f"segment: session {number}/{min(len(pending), batch_size)}")
        start = manifest.resume_from or 0
        messages = await asyncio.to_thread(store.transcript, manifest.session_key)
        outcome = await segment_session(repo, manifest, messages, start, segmenter, changes)
        changes.put(manifest, base)
        manifest.refresh_status()
        if manifest.status == "pending":
            report.pending[manifest.session_key] = manifest.status_reason or ""
        else:
            report.segmented.append(manifest.session_key)
        report.superseded += outcome.superseded
        report.invalidation_proposals += outcome.invalidation_proposals
    for manifest, _ in pending[batch_size:]:
        report.pending[manifest.session_key] = "waiting: over --batch-size this run"
    commit = await asyncio.to_thread(store.save, changes, "sessions: segment")
    report.commits += [commit] if commit else []


def window_budget(window_tokens: int, prompt_tokens: int | None) -> int:
    """The segmentation window: ``[sessions] window_tokens``, made smaller when the
    model's prompt budget (the embedded model's context) cannot hold it with the
    instructions (about 500 tokens) at the conservative 3 characters per token."""
    if prompt_tokens is None:
        return window_tokens
    fitting = prompt_tokens * CHARS_PER_TOKEN // 4 - PROMPT_OVERHEAD_TOKENS
    return max(MIN_WINDOW_TOKENS, min(window_tokens, fitting))


async def run_with_llm(repo: ExperienceRepository, options: LLMOptions, *,
                       batch_size: int = 50, mode: Literal["propose", "apply"] = "propose",
                       concurrency: int = 4, progress: Progress | None = None
                       ) -> SessionsRunReport:
    """:func:`run` with the LLM chosen as for ``expgit train`` (flags, environment,
    ``[llm]``). When none is configured (and none was asked for), the run goes on
    without one: sessions stay pending, nothing fails."""
    from expgit.llm.factory import open_llm  # the openai client loads only when needed

    try:
        runtime = open_llm(repo.settings.llm, choice=options.choice, model=options.model,
                           base_url=options.base_url, meter=None)
    except UsageError as exc:
        if options.choice is not None:
            raise
        report = await run(repo, batch_size=batch_size, llm=None, mode=mode,
                           concurrency=concurrency, progress=progress)
        report.notes.append(f"no LLM available: {exc.message}")
        return report
    async with runtime:
        report = await run(repo, batch_size=batch_size, llm=runtime, mode=mode,
                           concurrency=concurrency, progress=progress)
        report.llm_description = runtime.description
        report.usage = UsageReport.of(runtime.meter, repo.settings.llm.currency)
    return report


Unlabelled = tuple[str, str, str, SessionSignals | None]


def _unlabelled(manifests: list[SessionManifest], scored: bool) -> list[Unlabelled]:
    """(session key, fingerprint, topic, feedback signals) of each settled, unlabelled
    segment; without a scorer (``scored`` False) only those with feedback."""
    found = [(m.session_key, s.fingerprint, s.topic, segment_signals(m.signals, s.start, s.end))
             for m in manifests for s in m.settled() if not s.labelled]
    return [item for item in found if scored or item[3] is not None]


async def _label(repo: ExperienceRepository, store: SessionStore,
                 scorer: TrajectoryScorer | None, batch_size: int, concurrency: int,
                 report: SessionsRunReport, say: Progress) -> int:
    """Label the unlabelled segments (see the module docstring); how many by feedback."""
    todo = _unlabelled(await asyncio.to_thread(store.manifests), scorer is not None)
    todo = todo[:batch_size]
    gate = asyncio.Semaphore(concurrency)
    settings = repo.settings.sessions
    window = repo.settings.outcomes.reask_window_seconds
    patches: dict[str, list[Callable[[SessionManifest], None]]] = {}

    async def one(key: str, fp: str, topic: str, signals: SessionSignals | None) -> None:
        metrics: SegmentMetrics | None = None
        feedback: FeedbackLabel | None = None
        async with gate:
            messages = await asyncio.to_thread(store.segment_messages, fp)
            try:
                if signals is not None:  # the users said: no model call
                    feedback = label_segment(messages, signals, reask_window_seconds=window)
                else:
                    assert scorer is not None
                    metrics = await scorer.score(messages, topic)
            except (LLMError, ExpgitError) as exc:
                report.errors.append(f"label {fp}: {exc.message}")
                return
        report.labelled.append(fp)

        def patch(manifest: SessionManifest) -> None:
            for segment in manifest.segments:
                if segment.fingerprint == fp and segment.status == "active":
                    segment.metrics, segment.feedback = metrics, feedback
                    score = metrics.overall_score if metrics is not None else None
                    segment.memory_eligible = score is None or score >= settings.memory_threshold
                    segment.sft_eligible = score is not None and score >= settings.sft_threshold
                    segment.last_error = None

        patches.setdefault(key, []).append(patch)
        say(f"label: {len(report.labelled)}/{len(todo)} segments")

    await asyncio.gather(*(one(*item) for item in todo))
    commit = await asyncio.to_thread(store.patch, patches, "sessions: label segments")
    report.commits += [commit] if commit else []
    return sum(1 for item in todo if item[3] is not None and item[1] in report.labelled)
