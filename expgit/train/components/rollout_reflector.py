"""OneCallRolloutReflector: one rollout -> its trajectory and its gradients, in one call.

The default training step (``[train] calls_per_rollout = 1``): the ``reflect`` prompt shows
the case, the transcript, the evaluation and the most relevant experiences once, and the
reply (:func:`~expgit.train.components.llm_outputs.reflect_output`) holds the trajectory's
fields, then the proposed edits. The trajectory document is stored exactly as the
analyzer stores it, and the edits go through the estimator's checks and commits, so the
stored document and the gradients are the ones the two-call path makes (a junk analysis
is not stored, and its reply's edits are dropped with it); only the prompt differs (the
transcript is sent once, with no trajectory document and no second set of rules).

A rollout whose trajectory is already stored is not analysed again: its edits come from
the estimator's own call on the stored trajectory (one call, as before).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from expgit.core.domain import (
    AnalysisNotes,
    Rollout,
    RolloutAnalysis,
    RubricEvaluation,
    SemanticGradient,
)
from expgit.core.redaction.messages import Redactor
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.skill_listing import reflect_view
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.templates import render_prompt
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.llm_fields import fit_prompt
from expgit.train.components.llm_outputs import EstimatedEdit, reflect_output
from expgit.train.components.trajectory_analyzer import (
    TrajectoryRolloutAnalyzer,
    longest_part,
    transcript_view,
)
from expgit.train.context import PipelineContext
from expgit.train.records.trajectory_store import rollout_id

QUERY_CHARS = 4000  # of the transcript, for ranking the experiences to show


def ranking_query(rollout: Rollout, evaluation: RubricEvaluation | None) -> str:
    """What the experiences are ranked by before the run is analysed: the task
    signature, what the rubric calls good, the criteria the run failed, the case's input
    and the start of the transcript (system prompts left out: they list the experiences
    the agent had, and would pull them all up alike)."""
    text = "\n".join(m.plain_text for m in rollout.messages if m.role != "system")
    failed = [f"{r.criterion_name} {' '.join(r.feedback)}"
              for r in (evaluation.criterion_results if evaluation else []) if not r.passed]
    return "\n".join([rollout.case.task_signature, rollout.case.rubric.description or "",
                      *failed, json.dumps(rollout.case.input, ensure_ascii=False),
                      text[:QUERY_CHARS]])


def input_text(rollout: Rollout) -> str:
    """The case's input as JSON for the prompt; "" when it is one text that the first
    user message of the transcript already holds (it would be shown twice)."""
    values = list(rollout.case.input.values())
    first = next((m.plain_text for m in rollout.messages if m.role == "user"), "")
    if len(values) == 1 and isinstance(values[0], str) and values[0].strip() \
            and values[0].strip() in first:
        return ""
    return json.dumps(rollout.case.input, ensure_ascii=False, indent=2, sort_keys=True)


def extra_feedback(evaluation: RubricEvaluation | None) -> list[str]:
    """The evaluation's feedback lines that do not repeat what a failed criterion's line
    of the prompt already says ("<criterion>: <its feedback>")."""
    if evaluation is None:
        return []
    said = {f"{r.criterion_name}: {line}" for r in evaluation.criterion_results
            if not r.passed for line in r.feedback}
    return [line for line in evaluation.feedback if line not in said]



def without_evidence(analysis: RolloutAnalysis, edits: Sequence[EstimatedEdit],
                     redactor: Redactor) -> bool:
    """True when ``analysis`` stored no trajectory (its reply's analysis was junk): then
    the reply's ``edits`` have no evidence, and each is listed as dropped with it."""
    if analysis.trajectory is not None:
        return False
    notes = analysis.metadata
    notes.rejected_edits = (notes.rejected_edits or []) + [
        f"{e.action} {redactor.text(e.name)!r}: dropped with the degenerate analysis of "
        "its reply" for e in edits]
    return True

class OneCallRolloutReflector:
    """Analyses one rollout and proposes its edits with one ``reflect`` call (see the
    module docstring). The contract is the two steps' together: the trajectory goes to
    the trajectories branch only, each valid edit becomes a gradient commit, an invalid
    one is dropped with its reason in ``analysis.metadata.rejected_edits``, and
    ``main`` is never touched. Raises LLMError when the call fails.

    ``analyzer`` and ``estimator`` give the limits, the evaluator, the ranker, the
    redactor and the prompt budget (``prompt_tokens``: the least relevant experiences
    are dropped first, then the transcript's parts are halved, down to 200 characters)."""

    def __init__(self, analyzer: TrajectoryRolloutAnalyzer,
                 estimator: ExperienceGradientEstimator, llm: StructuredLLM) -> None:
        self.analyzer = analyzer
        self.estimator = estimator
        self.llm = llm

    async def reflect(self, rollout: Rollout, policy_set: Snapshot, context: PipelineContext
                      ) -> tuple[RolloutAnalysis, list[SemanticGradient]]:
        analyzer, estimator = self.analyzer, self.estimator
        tid = rollout_id(rollout)
        stored = await asyncio.to_thread(analyzer.store.find, tid)
        if stored is not None:
            analysis = await analyzer.reused(rollout, tid, stored)
            return analysis, await estimator.estimate(analysis, policy_set, context)
        evaluation, source = await analyzer.evaluation_of(rollout, context)
        view = analyzer.view(rollout)
        if not view:
            analysis = analyzer.skipped(rollout, tid, evaluation, source)
            analysis.metadata.rejected_edits = []
            return analysis, []
        relevant = await estimator.relevant(ranking_query(rollout, evaluation), policy_set)
        noted = AnalysisNotes()  # a stats error, if any, for the analysis
        experiences = await estimator.shown_with_stats(noted, relevant)
        edit_limits = estimator.edit_limits()
        output = reflect_output(analyzer.limits, edit_limits)
        case_input = input_text(rollout)
        skills = reflect_view(rollout, policy_set, analyzer.repo.settings)

        def render(kept: int, limit: int | None) -> tuple[str, str]:
            return render_prompt(
                "reflect", analyzer.repo, templates_at=policy_set.commit, case=rollout.case,
                case_input=case_input, evaluation=evaluation,
                messages=view if limit is None else transcript_view(rollout.messages,
                                                                    limit, limit),
                feedback=extra_feedback(evaluation), error=rollout.error,
                limits=analyzer.limits, experiences=experiences[:kept],
                rules=estimator.rules(edit_limits), skills=skills)

        system, user, kept = fit_prompt(render, analyzer.prompt_tokens, output,
                                        len(relevant), longest_part(view))
        relevant = relevant[:kept]
        out = await self.llm.generate("reflect", system, user, output)
        analysis = await analyzer.record(rollout, tid, out.analysis(analyzer.limits),
                                         evaluation, source, policy_set.commit,
                                         stage="reflect")
        analysis.metadata.stats_error = noted.stats_error
        if without_evidence(analysis, out.edits, estimator.redactor):
            return analysis, []
        return analysis, await estimator.commit_edits(out.edits, analysis, policy_set,
                                                      relevant, stage="reflect")
