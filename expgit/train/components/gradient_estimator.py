"""ExperienceGradientEstimator: one trajectory -> gradient commits
(docs/design.md, "Semantic gradients").

One ``estimate`` call per analysis, shown the trajectory and the most relevant
experiences in full (``[train] relevant_experiences`` of them, or the constructor's
``relevant_experiences``; fewer when the prompt would not fit ``prompt_tokens``). The
reply is a list of bounded edits (:func:`estimate_output`): name, action, rationale,
summary, tags, markdown body, confidence; expgit builds each file
(:func:`~expgit.train.components.llm_fields.compose_experience`) and commits it through
:func:`expgit.store.workflow.gradients.propose` (evidence = the trajectory's URI). An edit
that fails
validation is dropped and its reason recorded, never committed; so is an edit holding a
secret, copying ``[train] max_copied_words`` words of its case or trajectory, whose
rationale, summary or body is junk (``degenerate``), holding a prompt-injection payload
(``injection``), whose change is only cosmetic, or that removes half an experience's body
or more (``collapse``) (:mod:`expgit.train.guards.lesson`); a shorter copy is noted in
the gradient's rationale (and so in the PR body). Rationales are redacted. In the skills
layout the reply's summary is named ``description`` (the SKILL.md key it becomes), the
guards hold it to the spec too, a skill name the spec refuses is dropped (``skill_name``),
and a created experience is a new ``<root>/<name>/SKILL.md``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence

from expgit.core.domain import (
    AnalysisNotes,
    ExperienceFile,
    GradientNotes,
    RolloutAnalysis,
    SemanticGradient,
)
from expgit.core.redaction.messages import Redactor
from expgit.errors import ExpgitError, InvalidInputError
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.relevance import ExperienceRanker, LexicalRanker, ScoringRanker
from expgit.retrieval.skill_listing import reflect_view
from expgit.store.derived.predictions import VALUE_CHARS, prediction
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.format.provenance import TRAINER_MODEL, Provenance
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import Gradient, GradientRequest, propose
from expgit.train.components.llm_fields import (
    EditLimits,
    compose_experience,
    fence,
    fit_prompt,
    name_max,
    without_front_matter,
)
from expgit.train.components.llm_outputs import EstimatedEdit, estimate_output
from expgit.train.context import PipelineContext
from expgit.train.guards.edit import Rejected, Rejections, guard_edit
from expgit.train.guards.lesson import headings_shown
from expgit.train.measurement.track_record import ExperienceStats, UsageStatsSource, track_record


def shown(entry: ExperienceEntry, stats: ExperienceStats | None = None) -> dict[str, object]:
    """An experience as the prompts show it: the whole file (``text``, ``fence``), or
    only what an edit writes (``summary``, ``tags``, ``body``, ``body_fence``), and its
    track record."""
    text = entry.text
    experience = entry.experience
    body = experience.body if experience.body.endswith("\n") else experience.body + "\n"
    return {"name": entry.name, "path": entry.path, "version": entry.version,
            "text": text if text.endswith("\n") else text + "\n", "fence": fence(text),
            "summary": experience.front_matter.summary,
            "tags": list(experience.front_matter.tags), "body": body,
            "body_fence": fence(body), "track_record": track_record(stats)}


def provenance_trailers(analysis: RolloutAnalysis, llm: StructuredLLM,
                        models: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """The trailers expgit derives for an edit of ``analysis`` (never from the model's
    reply): its prediction, the case and task of a failed rollout it should turn to
    pass (:mod:`expgit.store.derived.predictions`), and the models that made it: ``models``
    (the run's provenance), or else the trainer model the port names."""
    case = analysis.rollout.case
    predicts = (prediction([case.name], [case.task_signature])
                if not analysis.evaluation.passed else prediction([], []))
    if any(key == TRAINER_MODEL for key, _ in models):
        return [*predicts.trailers(), *models]
    model = " ".join(llm.model.model.split())[:VALUE_CHARS]
    return [*predicts.trailers(), *models, *([(TRAINER_MODEL, model)] if model else [])]


def to_semantic(gradient: Gradient, trajectory_uri: str) -> SemanticGradient:
    change = gradient.change
    return SemanticGradient(
        target_experience_name=gradient.target,
        before=ExperienceFile(name=gradient.target, content=change.old_text)
        if change.old_blob else None,
        after=ExperienceFile(name=gradient.target, content=change.new_text)
        if change.new_blob else None,
        base_version=gradient.base_version, base_blob=gradient.base_blob,
        rationale=gradient.rationale, evidence_trajectory_uris=[trajectory_uri],
        confidence=gradient.confidence, gradient_id=gradient.id,
        metadata=GradientNotes(commit=gradient.commit, operation=gradient.operation))


class ExperienceGradientEstimator:
    """Proposes edits of experiences from one trajectory with one ``estimate`` call and
    commits each valid one as a gradient branch (``main`` is never touched).

    A "create" of a file that was shown is taken as its update (the model wrote it with
    the file in view). Rejected edits (over the token budget, identical to ``main``,
    create of an existing file not shown or without a body, update or delete of a
    missing file or of one not shown, a second edit of the same file) are listed, one
    reason per edit, in ``analysis.metadata.rejected_edits`` (set on every call;
    empty when none).

    ``relevant_experiences`` overrides ``[train] relevant_experiences``; ``limits`` bound
    the reply (the body is further capped to fit the repository's token budget);
    ``prompt_tokens``: drop the least relevant experiences until the prompt fits.

    With ``usage_stats`` (a source such as :func:`expgit.outcomes.stats.experience_stats`,
    which :func:`expgit.runs.wiring.build_pipeline` passes), each shown experience carries
    its track record (:func:`expgit.train.measurement.track_record.track_record`, one bounded line:
    runs that used it, passed/failed, mean score, helpful/harmful outcome reports), read
    from git with no LLM call; unreadable statistics are left out and noted in
    ``analysis.metadata.stats_error``. Without one, every experience shows "no
    recorded use yet"."""

    def __init__(self, repo: ExperienceRepository, llm: StructuredLLM,
                 ranker: ExperienceRanker | None = None, *,
                 relevant_experiences: int | None = None, limits: EditLimits | None = None,
                 prompt_tokens: int | None = None,
                 usage_stats: UsageStatsSource | None = None,
                 redactor: Redactor | None = None,
                 provenance: Provenance | None = None) -> None:
        self.repo = repo
        # the models' trailers on every gradient commit (None: none, as `expgit propose`)
        self.trailers = list(provenance.trailers()) if provenance is not None else []
        self.redactor = redactor or Redactor()
        self.usage_stats = usage_stats
        self.llm = llm
        self.ranker: ExperienceRanker = ranker or LexicalRanker()
        self.relevant_experiences = relevant_experiences
        self.limits = limits or EditLimits()
        self.prompt_tokens = prompt_tokens

    async def estimate(self, analysis: RolloutAnalysis, experience_set: Snapshot,
                       context: PipelineContext) -> list[SemanticGradient]:
        trajectory = analysis.trajectory
        if trajectory is None:  # e.g. a junk analysis: the analyzer said why, keep it
            analysis.metadata.rejected_edits = analysis.metadata.rejected_edits or []
            return []
        analysis.metadata.rejected_edits = []
        # ranked by the document's text, not its front matter (which lists every
        # experience the run had in context, and would pull them all up alike)
        query = (f"{trajectory.retrieval_anchor}\n{analysis.rollout.case.task_signature}\n"
                 f"{without_front_matter(trajectory.content)}")
        relevant = await self.relevant(query, experience_set)
        experiences = await self.shown_with_stats(analysis.metadata, relevant)
        limits = self.edit_limits()
        output = estimate_output(limits)

        def render(kept: int, _: int | None) -> tuple[str, str]:
            return render_prompt(
                "estimate", self.repo, templates_at=experience_set.commit,
                trajectory=trajectory, trajectory_fence=fence(trajectory.content),
                experiences=experiences[:kept], rules=self.rules(limits),
                skills=reflect_view(analysis.rollout, experience_set, self.repo.settings))

        system, user, kept = fit_prompt(render, self.prompt_tokens, output, len(relevant))
        relevant = relevant[:kept]
        out = await self.llm.generate("estimate", system, user, output)
        return await self.commit_edits(out.edits, analysis, experience_set, relevant)

    async def relevant(self, query: str, experience_set: Snapshot) -> list[ExperienceEntry]:
        """The experiences to show for ``query``, best first: ``relevant_experiences``
        (else ``[train] relevant_experiences``) of them, leaving out, when the ranker
        tells scores, those under ``[train] relevance_floor`` times the best one's."""
        train = self.repo.settings.train
        k = (self.relevant_experiences if self.relevant_experiences is not None
             else train.relevant_experiences)
        if not k:
            return []
        if not isinstance(self.ranker, ScoringRanker):
            return await self.ranker.rank(query, experience_set, k)
        scored = await self.ranker.ranked(query, experience_set, k)
        best = scored[0][0] if scored else 0.0
        return [entry for score, entry in scored
                if best <= 0 or score >= train.relevance_floor * best]

    def edit_limits(self) -> EditLimits:
        """The bounds of the edits, the body capped to the repository's token budget, for
        its layout (the skills layout: the reply's summary field is ``description``)."""
        settings = self.repo.settings
        return self.limits.for_budget(settings.token_budget).for_layout(settings.layout)

    def rules(self, limits: EditLimits) -> dict[str, object]:
        """The prompts' ``rules``: the bounds an edit must keep."""
        settings = self.repo.settings
        return {"root": settings.experiences_root, "token_budget": settings.token_budget,
                "name_max": name_max(limits), "name_words": limits.name_words,
                "max_edits": limits.max_edits, "body_chars": limits.body_chars,
                "summary_chars": limits.summary_chars, "max_tags": limits.max_tags,
                "rationale_chars": limits.rationale_chars,
                "allow_delete": limits.allow_delete, "main_branch": settings.main_branch}

    async def shown_with_stats(self, notes: AnalysisNotes,
                               relevant: list[ExperienceEntry]) -> list[dict[str, object]]:
        """``relevant`` as the prompts show them, each with its track record (unreadable
        statistics: left out, and noted in ``notes.stats_error``)."""
        stats = await self._stats(notes) if relevant else {}
        return [shown(e, stats.get(e.name)) for e in relevant]

    async def commit_edits(self, edits: Sequence[EstimatedEdit], analysis: RolloutAnalysis,
                           experience_set: Snapshot, relevant: Sequence[ExperienceEntry],
                           *, stage: str = "estimate") -> list[SemanticGradient]:
        """Check each edit the model proposed with ``relevant`` in view and commit the
        valid ones as gradients; the others are listed with their reasons in
        ``analysis.metadata.rejected_edits``. When every edit was junk, the call of
        ``stage`` counts as failed (``degenerate``)."""
        rejections = Rejections(self.redactor)
        analysis.metadata.rejected_edits = rejections.reasons
        trajectory = analysis.trajectory
        if trajectory is None:
            return []
        settings = self.repo.settings
        visible = {e.name for e in relevant}
        seen: set[str] = set()
        gradients: list[SemanticGradient] = []
        rollout = analysis.rollout
        sources = [json.dumps(rollout.case.input, ensure_ascii=False),
                   *(m.plain_text for m in rollout.messages if m.role != "system")]
        shown = headings_shown(e.text for e in relevant)
        trailers = provenance_trailers(analysis, self.llm, self.trailers)
        for edit in edits:
            # a create of a file that was shown is its update (written with it in view)
            action = "update" if edit.action == "create" and edit.name in visible \
                else edit.action

            def target(path: str, edit: EstimatedEdit = edit, action: str = action
                       ) -> tuple[str | None, str | None]:
                _check_target(edit.name, action, experience_set, visible, seen)
                current = experience_set.entries[edit.name].text \
                    if action != "create" else None
                return current, None if action == "delete" else compose_experience(
                    edit.name, current, summary=edit.summary, tags=edit.tags, body=edit.body,
                    path=path)

            verdict = guard_edit(edit, target, path_of=self.repo.path_of, sources=sources,
                                 max_copied_words=settings.train.max_copied_words,
                                 shown=shown, skills=self.repo.layout.skills)
            if isinstance(verdict, Rejected):
                rejections.add(edit, verdict)
                continue
            rationale = self.redactor.text(edit.rationale)
            if verdict.note is not None:
                rationale = f"{rationale} (flagged: {verdict.note})"
            request = GradientRequest(name=edit.name, content=verdict.content,
                                      delete=verdict.content is None, rationale=rationale,
                                      evidence=[trajectory.uri], confidence=edit.confidence)
            try:
                gradient = await asyncio.to_thread(propose, self.repo, request, trailers)
            except InvalidInputError as exc:
                rejections.add(edit, Rejected.of(exc))
                continue
            seen.add(gradient.target)
            gradients.append(to_semantic(gradient, trajectory.uri))
        rejections.count_all_junk(self.llm, stage, edits,
                                  f"edits of case {analysis.rollout.case.name}")
        return gradients

    async def _stats(self, notes: AnalysisNotes) -> Mapping[str, ExperienceStats]:
        if self.usage_stats is None:
            return {}
        try:
            return await asyncio.to_thread(self.usage_stats, self.repo)
        except ExpgitError as exc:
            notes.stats_error = exc.message
            return {}


def _check_target(name: str, action: str, snapshot: Snapshot, visible: set[str],
                  seen: set[str]) -> None:
    """The checks of an edit's target that propose cannot make (InvalidInputError)."""
    if name in seen:
        raise InvalidInputError("a second edit of the same experience in one reply")
    if action == "create" and name in snapshot:
        raise InvalidInputError("create of an experience that already exists (and was "
                                "not shown)")
    if action != "create" and name not in snapshot:
        raise InvalidInputError(f"{action} of an experience that does not exist")
    if action != "create" and name not in visible:
        raise InvalidInputError(f"{action} of an experience that was not shown "
                                "(its current content was not considered)")
