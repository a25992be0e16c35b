"""GroupReflector: a group of runs of one case -> one trajectory and its gradients, in at
most one ``group_reflect`` call (``[train] group_size`` > 1).

The runs that finished (no error) are judged as the single-run path judges them (the
rollout's evaluation, else the evaluator). When fewer than two finished, or all got the
same evaluation (:func:`~expgit.train.groups.verdict`: passed, and the same failed
criteria), the group teaches nothing and is skipped: no call. Otherwise the prompt shows
the case once, the best and the worst run in full (the transcript as the reflect prompt
shows it, halved like it to fit the prompt budget), the others by their final answer in
short, and each run's evaluation; the reply (:func:`group_reflect_output`) holds the
trajectory's fields, the difference that decided the outcome, then the edits.

The group's trajectory is stored like a run's (``rollout`` = its worst run, whose
evaluation and outcome it carries) under the content hash of every run's id, with a
``group`` list in its front matter naming each run, its outcome and its error (and, once
transcripts are stored beside trajectories, their reference: :attr:`GroupRun.transcript`).
The gradients cite that trajectory as their evidence. A stored group costs only the
estimator's call on its trajectory, as a stored run does.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from expgit.core.domain import (
    AnalysisNotes,
    EvaluationSource,
    GroupNote,
    Rollout,
    RolloutAnalysis,
    RubricEvaluation,
    SemanticGradient,
)
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.skill_listing import reflect_view
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.templates import render_prompt
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.group_outputs import group_reflect_output
from expgit.train.components.llm_fields import fit_prompt
from expgit.train.components.rollout_reflector import (
    input_text,
    ranking_query,
    without_evidence,
)
from expgit.train.components.trajectory_analyzer import (
    TrajectoryRolloutAnalyzer,
    fallback_evaluation,
    longest_part,
    outcome_of,
    transcript_view,
    truncate,
)
from expgit.train.context import PipelineContext
from expgit.train.groups import (
    GroupDocument,
    GroupRun,
    failed_criteria,
    rank_key,
    verdict,
)
from expgit.train.records.trajectory_store import ID_LEN, rollout_id

SHORT_CHARS = 300  # of an "other" run's final answer


def group_id(runs: Sequence[Rollout]) -> str:
    """The content address of a group: SHA-256 of its runs' ids in order, 16 digits."""
    joined = "\n".join(rollout_id(r) for r in runs)
    return hashlib.sha256(f"group\n{joined}".encode()).hexdigest()[:ID_LEN]


def final_answer(rollout: Rollout) -> str:
    """The run's last assistant text ("" if none)."""
    texts = [m.plain_text for m in rollout.messages if m.role == "assistant"]
    return next((t for t in reversed(texts) if t.strip()), "")


@dataclass
class GroupReflection:
    """One group's outcome: skipped (``skipped`` says why) or reflected on."""

    analysis: RolloutAnalysis | None = None
    gradients: list[SemanticGradient] | None = None
    skipped: str | None = None
    errors: int = 0  # runs that failed with an error


@dataclass
class _Judged:
    run: int
    rollout: Rollout
    evaluation: RubricEvaluation
    source: EvaluationSource


class GroupReflector:
    """Reflects on one group with at most one ``group_reflect`` call (module docstring).
    ``analyzer`` and ``estimator`` give the limits, evaluator, ranker, redactor, store
    and prompt budget, as for :class:`OneCallRolloutReflector`. Raises LLMError when
    the call fails."""

    def __init__(self, analyzer: TrajectoryRolloutAnalyzer,
                 estimator: ExperienceGradientEstimator, llm: StructuredLLM) -> None:
        self.analyzer = analyzer
        self.estimator = estimator
        self.llm = llm

    async def _judged(self, runs: Sequence[Rollout], context: PipelineContext
                      ) -> list[_Judged]:
        judged = []
        for number, rollout in enumerate(runs):
            if rollout.error is not None:
                continue
            evaluation, source = await self.analyzer.evaluation_of(rollout, context)
            if evaluation is None:
                evaluation = fallback_evaluation(bool(self.analyzer.view(rollout)))
            judged.append(_Judged(number, rollout, evaluation, source))
        return judged

    async def reflect(self, runs: Sequence[Rollout], policy_set: Snapshot,
                      context: PipelineContext) -> GroupReflection:
        errors = sum(1 for r in runs if r.error is not None)
        judged = await self._judged(runs, context)
        if len(judged) < 2:
            return GroupReflection(skipped=f"{len(judged)} of {len(runs)} runs finished: "
                                   "nothing to contrast", errors=errors)
        if len({verdict(j.evaluation) for j in judged}) == 1:
            return GroupReflection(skipped="every run got the same evaluation",
                                   errors=errors)
        ranked = sorted(judged, key=lambda j: rank_key(j.evaluation), reverse=True)
        best, worst = ranked[0], ranked[-1]
        gid = group_id(runs)
        analyzer, estimator = self.analyzer, self.estimator
        stored = await asyncio.to_thread(analyzer.store.find, gid)
        if stored is not None:
            analysis = analyzer.reuse(worst.rollout, gid, stored)
            return GroupReflection(analysis, await estimator.estimate(
                analysis, policy_set, context), errors=errors)
        relevant = await estimator.relevant(
            ranking_query(worst.rollout, worst.evaluation) + "\n" + final_answer(best.rollout),
            policy_set)
        noted = AnalysisNotes()  # a stats error, if any, for the analysis
        experiences = await estimator.shown_with_stats(noted, relevant)
        edit_limits = estimator.edit_limits()
        output = group_reflect_output(analyzer.limits, edit_limits)
        views = {j.run: analyzer.view(j.rollout) for j in (best, worst)}

        def render(kept: int, limit: int | None) -> tuple[str, str]:
            shown = views if limit is None else {
                j.run: transcript_view(j.rollout.messages, limit, limit) for j in (best, worst)}
            return render_prompt(
                "group_reflect", analyzer.repo, templates_at=policy_set.commit,
                case=worst.rollout.case, case_input=input_text(worst.rollout),
                runs=self._shown(ranked, shown), errors=errors, limits=analyzer.limits,
                experiences=experiences[:kept], rules=estimator.rules(edit_limits),
                skills=reflect_view(worst.rollout, policy_set, analyzer.repo.settings))

        system, user, kept = fit_prompt(render, analyzer.prompt_tokens, output, len(relevant),
                                        max(longest_part(v) for v in views.values()))
        relevant = relevant[:kept]
        out = await self.llm.generate("group_reflect", system, user, output)
        document = GroupDocument(runs=self._runs(runs, judged), difference=out.difference)
        analysis = await analyzer.record(
            worst.rollout, gid, out.analysis(analyzer.limits, outcome_of(worst.evaluation)),
            worst.evaluation, worst.source, policy_set.commit, stage="group_reflect",
            group=document)
        analysis.metadata.stats_error = noted.stats_error
        if without_evidence(analysis, out.edits, estimator.redactor):
            return GroupReflection(analysis, [], errors=errors)
        analysis.metadata.group = GroupNote(runs=len(runs), finished=len(judged),
                                            passed=sum(j.evaluation.passed for j in judged))
        # the copy guard reads every shown run's words, not only the worst run's
        seen = analysis.model_copy(update={"rollout": worst.rollout.model_copy(update={
            "messages": [m for j in ranked for m in j.rollout.messages]})})
        gradients = await estimator.commit_edits(out.edits, seen, policy_set, relevant,
                                                 stage="group_reflect")
        return GroupReflection(analysis, gradients, errors=errors)

    @staticmethod
    def _shown(ranked: Sequence[_Judged], views: dict[int, list[dict[str, Any]]]
               ) -> list[dict[str, Any]]:
        """The runs as the prompt shows them, best first."""
        shown = []
        for j in ranked:
            full = j.run in views
            label = ("best" if j is ranked[0] else "worst" if j is ranked[-1] else "other")
            shown.append({"label": label, "run": j.run, "evaluation": j.evaluation,
                          "error": j.rollout.error, "messages": views[j.run] if full else None,
                          "answer": None if full else truncate(final_answer(j.rollout),
                                                               SHORT_CHARS)})
        return shown

    def _runs(self, runs: Sequence[Rollout], judged: Sequence[_Judged]) -> list[GroupRun]:
        """Every run of the group, with its own outcome (or error)."""
        by_run = {j.run: j.evaluation for j in judged}
        out = []
        for number, rollout in enumerate(runs):
            evaluation = by_run.get(number)
            out.append(GroupRun(
                run=number, rollout_id=rollout_id(rollout),
                passed=evaluation.passed if evaluation else None,
                score=evaluation.score if evaluation else None,
                failed_criteria=failed_criteria(evaluation), error=rollout.error,
                transcript=transcript_reference(rollout)))
        return out


def transcript_reference(rollout: Rollout) -> str | None:
    """The reference of the run's stored transcript, when the executor or the trainer
    recorded one (``metadata["transcript"]``: the seam for transcripts stored beside
    trajectories); None otherwise."""
    value = rollout.metadata.get("transcript")
    return value if isinstance(value, str) else None


