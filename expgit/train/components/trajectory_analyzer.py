"""TrajectoryRolloutAnalyzer: a rollout -> one trajectory document on the trajectories
branch (docs/design.md, "Trajectories"), with at most one LLM call.

The stored document (``templates/trajectory.md.j2``) starts with YAML front matter that
expgit reads back: ``outcome``, ``retrieval_anchor``, ``title`` and the ``evaluation`` it
was written with, so a second analysis of the same rollout reuses it without any call;
``experiences_used`` (``[{name, blob}]``, from the rollout's metadata) and
``analyzed_at`` (UTC, ISO 8601) feed the per-experience statistics
(:mod:`expgit.outcomes.stats`). The rollout's transcript is stored beside it, in the same
commit (:mod:`expgit.train.records.transcript`).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from expgit.core.domain import (
    AnalysisNotes,
    EvaluationSource,
    Message,
    Rollout,
    RolloutAnalysis,
    RubricEvaluation,
    TextPart,
    Trajectory,
    TrajectoryNotes,
)
from expgit.core.redaction.messages import Redactor
from expgit.errors import InvalidInputError
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.usage import read_usage, usage_records
from expgit.store.format.templates import render, render_prompt
from expgit.store.format.yamldump import safe_dump
from expgit.store.format.yamlload import BoundedSafeLoader
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import AnalysisLimits, fit_prompt
from expgit.train.components.llm_outputs import AnalyzeOutput, analyze_output
from expgit.train.context import PipelineContext
from expgit.train.groups import GroupDocument
from expgit.train.guards.lesson import DEGENERATE, count_degenerate_reply, written_problem
from expgit.train.interfaces import RolloutEvaluator
from expgit.train.records.trajectory_store import TrajectoryStore, rollout_id
from expgit.train.records.transcript import build_transcript

FALLBACK_NOTE = ("fallback evaluation: neither the environment nor an evaluator judged "
                 "this rollout")


def truncate(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters: its head and tail around a marker
    ``[... N chars truncated]`` (N = characters left out)."""
    if len(text) <= limit:
        return text
    head = max(1, limit * 3 // 4)
    tail = limit - head
    return (f"{text[:head]}\n[... {len(text) - head - tail} chars truncated]\n"
            + (text[-tail:] if tail > 0 else ""))


def transcript_view(messages: Sequence[Message], limit: int,
                    text_limit: int | None = None) -> list[dict[str, Any]]:
    """The messages as the prompt shows them, tool inputs and outputs truncated to
    ``limit`` characters (texts to ``text_limit``, if given); empty messages are left
    out."""
    view: list[dict[str, Any]] = []
    for message in messages:
        parts: list[dict[str, str]] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                if part.text.strip():
                    text = part.text if text_limit is None else truncate(part.text,
                                                                         text_limit)
                    parts.append({"type": "text", "text": text})
                continue
            args = json.dumps(part.tool_input, ensure_ascii=False, sort_keys=True)
            output = "(no output)" if part.tool_output is None else part.tool_output
            parts.append({"type": "tool", "name": part.tool_name, "id": part.tool_id,
                          "status": part.tool_status, "input": truncate(args, limit),
                          "output": truncate(output, limit)})
        if parts:
            view.append({"role": message.role, "parts": parts})
    return view


def longest_part(view: list[dict[str, Any]]) -> int:
    """The characters of the longest text, tool input or tool output of a
    :func:`transcript_view` (where halving it to fit a prompt budget starts)."""
    return max((len(v) for m in view for p in m["parts"] for k, v in p.items()
                if k in ("text", "input", "output")), default=0)


def fallback_evaluation(extracted: bool, missing: str = "empty transcript"
                        ) -> RubricEvaluation:
    """The fallback evaluation of docs/design.md ("Cases and rollouts"): with no other
    evaluation, passed iff a trajectory was extracted (``missing``: why none was)."""
    why = ("passed because a trajectory was extracted" if extracted
           else f"failed because no trajectory could be extracted ({missing})")
    return RubricEvaluation(passed=extracted, score=1.0 if extracted else 0.0,
                            feedback=[f"{FALLBACK_NOTE}; {why}"],
                            metadata={"source": "fallback"})


def outcome_of(evaluation: RubricEvaluation) -> Literal["success", "failure", "partial"]:
    """The outcome an evaluation implies (the analyze prompt's rule): passed -> success;
    failed with a score of at most 0.2 -> failure; otherwise partial."""
    if evaluation.passed:
        return "success"
    return "failure" if evaluation.score <= 0.2 else "partial"


def read_front_matter(text: str, uri: str) -> dict[str, Any]:
    """The YAML front matter of a stored trajectory document."""
    end = text.find("\n---\n", 4)
    try:
        data = yaml.load(text[4:end + 1], Loader=BoundedSafeLoader) \
            if text.startswith("---\n") and end > 0 else None
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        raise InvalidInputError(f"trajectory {uri} has no readable front matter")
    return data


def without_junk(out: AnalyzeOutput, counts: Counter[str]) -> tuple[AnalyzeOutput, str | None]:
    """The analysis without its junk key steps, mistakes and lessons, nor a line said
    twice (each counted as ``degenerate`` in ``counts``), and why the whole of it is
    junk: its title, summary or retrieval anchor is
    (:func:`expgit.train.guards.lesson.written_problem`), or nothing readable is left;
    None when it is not."""
    kept: dict[str, list[str]] = {}
    seen: set[str] = set()
    for field in ("key_steps", "mistakes", "lessons"):
        items: list[str] = getattr(out, field)
        kept[field] = []
        for line in items:
            if line not in seen and written_problem("line", line) is None:
                kept[field].append(line)
            seen.add(line)
        counts[DEGENERATE] += len(items) - len(kept[field])
    out = out.model_copy(update=kept)
    found = (written_problem("title", out.title, prose=False)
             or written_problem("retrieval anchor", out.retrieval_anchor, keywords=True)
             or written_problem("analysis summary", out.summary))
    if found is None and not out.summary.strip() and not any(kept.values()):
        found = "nothing readable is left"
    return out, found


class TrajectoryRolloutAnalyzer:
    """Turns a rollout into a trajectory document stored (content-addressed) on the
    trajectories branch, with one ``analyze`` call; an already stored rollout is reused
    with no call. Evaluation: ``rollout.evaluation``, else the evaluator, else the
    fallback of docs/design.md. ``analysis.metadata``: ``trajectory_id``, ``reused``
    (bool), ``evaluation_source`` (rollout | evaluator | fallback | stored). With an evaluation
    (not the fallback), the trajectory's outcome follows from it (:func:`outcome_of`),
    whatever the model said.

    The reply and the evaluation are redacted before the document is written.
    ``limits`` bound the reply; ``prompt_tokens``: when the prompt would not fit, the
    transcript's parts are truncated harder (halving, down to 200 characters each)."""

    def __init__(self, repo: ExperienceRepository, llm: StructuredLLM,
                 evaluator: RolloutEvaluator | None = None, *,
                 limits: AnalysisLimits | None = None,
                 prompt_tokens: int | None = None, redactor: Redactor | None = None) -> None:
        self.repo = repo
        self.llm = llm
        self.evaluator = evaluator
        self.redactor = redactor or Redactor()
        self.limits = limits or AnalysisLimits()
        self.prompt_tokens = prompt_tokens
        self.store = TrajectoryStore(repo)

    async def analyze(self, rollout: Rollout, context: PipelineContext) -> RolloutAnalysis:
        tid = rollout_id(rollout)
        stored = await asyncio.to_thread(self.store.find, tid)
        if stored is not None:
            return await self.reused(rollout, tid, stored)
        evaluation, source = await self.evaluation_of(rollout, context)
        view = self.view(rollout)
        if not view:
            return self.skipped(rollout, tid, evaluation, source)
        output = analyze_output(self.limits)
        templates_at = self.repo.git.ref(self.repo.main_ref)  # both renders: one main
        system, user = self._prompt(rollout, view, evaluation, output, templates_at)
        out = await self.llm.generate("analyze", system, user, output)
        return await self.record(rollout, tid, out, evaluation, source, templates_at,
                                 stage="analyze")

    def view(self, rollout: Rollout) -> list[dict[str, Any]]:
        """The rollout's transcript as the prompts show it (tool parts truncated to
        ``[train] tool_output_chars``)."""
        return transcript_view(rollout.messages, self.repo.settings.train.tool_output_chars)

    def skipped(self, rollout: Rollout, tid: str, evaluation: RubricEvaluation | None,
                source: EvaluationSource) -> RolloutAnalysis:
        """The analysis of a rollout with an empty transcript: no call, no trajectory."""
        return RolloutAnalysis(
            rollout=rollout, evaluation=evaluation or fallback_evaluation(False),
            metadata=AnalysisNotes(trajectory_id=tid, reused=False, evaluation_source=source,
                                   skipped="empty transcript: nothing to analyse"))

    async def record(self, rollout: Rollout, tid: str, out: AnalyzeOutput,
                     evaluation: RubricEvaluation | None, source: EvaluationSource,
                     templates_at: str | None, *, stage: str,
                     group: GroupDocument | None = None) -> RolloutAnalysis:
        """Store the trajectory document of the model's analysis ``out`` (redacted first:
        the model may obey an injection; its junk lines dropped) and return the analysis;
        the outcome follows from ``evaluation`` when there is one; ``group``: the document is
        a group's (``rollout`` its worst run), naming every run and the difference. A junk
        analysis (:func:`without_junk`) is not stored: the analysis has no trajectory, says
        why in ``metadata.skipped`` and ``metadata.rejected_edits``, and the call of ``stage``
        is counted as failed (``degenerate``)."""
        out, junk = without_junk(self.redactor.model(out), self.redactor.counts)
        if junk is not None:
            self.redactor.counts[DEGENERATE] += 1
            count_degenerate_reply(self.llm, stage, f"the analysis of case "
                                   f"{rollout.case.name}: {junk}")
            skipped = f"trajectory not stored: degenerate: {junk}"
            return RolloutAnalysis(
                rollout=rollout,
                evaluation=evaluation or fallback_evaluation(False, "degenerate analysis"),
                metadata=AnalysisNotes(trajectory_id=tid, reused=False,
                                       evaluation_source=source, skipped=skipped,
                                       rejected_edits=[skipped]))
        if evaluation is None:
            evaluation = fallback_evaluation(True)
        else:  # the evaluation is the ground truth: the outcome follows from it
            out = out.model_copy(update={"outcome": outcome_of(evaluation)})
        evaluation = self.redactor.model(evaluation)
        group = self.redactor.model(group) if group is not None else None
        if group is not None and written_problem("difference", group.difference):
            self.redactor.counts[DEGENERATE] += 1  # the runs stay; the junk sentence goes
            group = group.model_copy(update={"difference": ""})
        document = self._document(rollout, tid, out, evaluation, source, templates_at,
                                  group)
        uri, created = await asyncio.to_thread(
            self.store.store, tid, document, f"trajectory: {out.title}",
            self.transcript(rollout, tid))
        if not created:  # another analyzer stored this rollout meanwhile: theirs wins
            return self.reuse(rollout, tid, await asyncio.to_thread(self.store.read, uri))
        trajectory = Trajectory(
            name=tid, uri=uri, content=document, outcome=out.outcome,
            retrieval_anchor=out.retrieval_anchor,
            metadata=TrajectoryNotes(title=out.title, case=rollout.case.name,
                                     evaluation_source=source))
        return RolloutAnalysis(rollout=rollout, evaluation=evaluation, trajectory=trajectory,
                               metadata=AnalysisNotes(trajectory_id=tid, reused=False,
                                                      evaluation_source=source))

    def _prompt(self, rollout: Rollout, view: list[dict[str, Any]],
                evaluation: RubricEvaluation | None, output: type[AnalyzeOutput],
                templates_at: str | None) -> tuple[str, str]:
        """The analyze prompt; over ``prompt_tokens``, the transcript's parts are cut
        (:func:`~expgit.train.components.llm_fields.fit_prompt`)."""
        case_input = json.dumps(rollout.case.input, ensure_ascii=False, indent=2,
                                sort_keys=True)

        def render(_: int, limit: int | None) -> tuple[str, str]:
            return render_prompt(
                "analyze", self.repo, templates_at=templates_at, case=rollout.case,
                messages=view if limit is None else transcript_view(rollout.messages,
                                                                    limit, limit),
                evaluation=evaluation, error=rollout.error, case_input=case_input,
                limits=self.limits)

        system, user, _ = fit_prompt(render, self.prompt_tokens, output,
                                     longest=longest_part(view))
        return system, user

    async def evaluation_of(self, rollout: Rollout, context: PipelineContext
                        ) -> tuple[RubricEvaluation | None, EvaluationSource]:
        if rollout.evaluation is not None:
            return rollout.evaluation, "rollout"
        if self.evaluator is not None:
            return await self.evaluator.evaluate(rollout, context), "evaluator"
        return None, "fallback"

    def _document(self, rollout: Rollout, tid: str, out: AnalyzeOutput,
                  evaluation: RubricEvaluation, source: EvaluationSource, templates_at: str | None,
                  group: GroupDocument | None = None) -> str:
        used = read_usage(rollout.metadata)
        front = {
            "name": tid, "kind": "trajectory", "title": out.title, "outcome": out.outcome,
            "retrieval_anchor": out.retrieval_anchor, "case": rollout.case.name,
            "task_signature": rollout.case.task_signature,
            "policy_snapshot_id": rollout.policy_snapshot_id,
            "evaluation_source": source, "evaluation": evaluation.model_dump(mode="json"),
            "experiences_used": usage_records(used),
            "analyzed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if rollout.skills_loaded is not None:  # listing mode: the skills' reach
            front["skills_listed"] = list(rollout.skills_listed or [])
            front["skills_loaded"] = list(rollout.skills_loaded)
        if group is not None:
            front["group"] = [run.model_dump(mode="json") for run in group.runs]
        front_matter = safe_dump(front, sort_keys=False, allow_unicode=True, width=1000)
        return render("trajectory.md.j2", self.repo, templates_at=templates_at,
                      front_matter=front_matter, analysis=out,
                      case=rollout.case, evaluation=evaluation, evaluation_source=source,
                      rollout_error=rollout.error, group=group)

    def transcript(self, rollout: Rollout, tid: str) -> bytes:
        """The stored form of the rollout's transcript (:mod:`expgit.train.records.transcript`)."""
        settings = self.repo.settings
        return build_transcript(
            rollout, tid, lambda tools, texts: transcript_view(rollout.messages, tools, texts),
            self.redactor, tool_limit=settings.train.tool_output_chars,
            text_limit=settings.limits.max_message_chars).encode()

    async def reused(self, rollout: Rollout, tid: str, document: str) -> RolloutAnalysis:
        """:meth:`reuse`, and the transcript stored beside a trajectory written before
        transcripts were kept (the same rollout: the same id, so the right transcript)."""
        if await asyncio.to_thread(self.store.find_transcript, tid) is None:
            await asyncio.to_thread(self.store.add_transcript, tid, self.transcript(rollout, tid))
        return self.reuse(rollout, tid, document)

    def reuse(self, rollout: Rollout, tid: str, document: str) -> RolloutAnalysis:
        """The analysis of a rollout whose trajectory is stored (``document``)."""
        uri = self.store.uri_of(tid)
        front = read_front_matter(document, uri)
        try:
            stored = RubricEvaluation.model_validate(front.get("evaluation"))
            trajectory = Trajectory.model_validate({
                "name": tid, "uri": uri, "content": document, "outcome": front.get("outcome"),
                "retrieval_anchor": str(front.get("retrieval_anchor") or ""),
                "metadata": {"title": str(front.get("title") or ""), "case": rollout.case.name,
                             "evaluation_source": front.get("evaluation_source", "stored")}})
        except ValidationError as exc:
            raise InvalidInputError(f"trajectory {uri} has invalid front matter: "
                                    f"{exc.errors()[0]['msg']}") from None
        source: EvaluationSource = "rollout" if rollout.evaluation else "stored"
        evaluation = rollout.evaluation or stored
        return RolloutAnalysis(rollout=rollout, evaluation=evaluation, trajectory=trajectory,
                               metadata=AnalysisNotes(trajectory_id=tid, reused=True,
                                                      evaluation_source=source))
