"""ExperienceGradientEstimator: one trajectory -> gradient commits (RFC 6.5).

One ``estimate`` call per analysis, shown the trajectory and the ``[train]
relevant_experiences`` most relevant experiences in full. Each proposed edit is committed
through :func:`expgit.gradients.propose` (evidence = the trajectory's URI); an edit that
fails validation is dropped and its reason recorded, never committed.
"""

from __future__ import annotations

import asyncio
import re
from typing import Literal

from pydantic import BaseModel, Field

from expgit.errors import InvalidInputError
from expgit.experience import NAME_MAX, check_name
from expgit.gradients import Gradient, GradientRequest, propose
from expgit.llm.structured import StructuredLLM
from expgit.repository import ExperienceRepository
from expgit.snapshot import ExperienceEntry, Snapshot
from expgit.templates import render_prompt
from expgit.train.context import PipelineContext
from expgit.train.domain import ExperienceFile, RolloutAnalysis, SemanticGradient
from expgit.train.relevance import ExperienceRanker, LexicalRanker

_FENCED = re.compile(r"^\s*(`{3,}|~{3,})[\w-]*\n(.*?)\n\1\s*$", re.S)


class EstimatedEdit(BaseModel):
    name: str
    action: Literal["create", "update", "delete"]
    content: str | None = None
    rationale: str
    confidence: float = Field(ge=0, le=1)


class EstimateOutput(BaseModel):
    """The estimator's reply: the proposed edits (possibly none)."""

    edits: list[EstimatedEdit] = Field(default_factory=list)


def normalise_content(text: str) -> str:
    """A file as the model wrote it, without a fence around the whole of it, ending in a
    newline."""
    match = _FENCED.match(text)
    body = match.group(2) if match else text
    return body if body.endswith("\n") else body + "\n"


def fence(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text`` (at least four)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(4, longest + 1)


def shown(entry: ExperienceEntry) -> dict[str, object]:
    text = entry.text
    return {"name": entry.name, "path": entry.path, "version": entry.version,
            "text": text if text.endswith("\n") else text + "\n", "fence": fence(text)}


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
        metadata={"commit": gradient.commit, "operation": gradient.operation})


class ExperienceGradientEstimator:
    """Proposes edits of experiences from one trajectory with one ``estimate`` call and
    commits each valid one as a gradient branch (``main`` is never touched).

    Rejected edits (invalid name or front matter, over the token budget, identical to
    ``main``, create of an existing file, update or delete of a missing file or of one
    not shown, a second edit of the same file) are listed, one reason per edit, in
    ``analysis.metadata["rejected_edits"]`` (set on every call; empty when none)."""

    def __init__(self, repo: ExperienceRepository, llm: StructuredLLM,
                 ranker: ExperienceRanker | None = None) -> None:
        self.repo = repo
        self.llm = llm
        self.ranker: ExperienceRanker = ranker or LexicalRanker()

    async def estimate(self, analysis: RolloutAnalysis, experience_set: Snapshot,
                       context: PipelineContext) -> list[SemanticGradient]:
        rejected: list[str] = []
        analysis.metadata["rejected_edits"] = rejected
        trajectory = analysis.trajectory
        if trajectory is None:
            return []
        settings = self.repo.settings
        k = settings.train.relevant_experiences
        query = (f"{trajectory.retrieval_anchor}\n{analysis.rollout.case.task_signature}\n"
                 f"{trajectory.content}")
        relevant = await self.ranker.rank(query, experience_set, k) if k else []
        rules = {"root": settings.experiences_root, "token_budget": settings.token_budget,
                 "max_chars": settings.token_budget * 4, "name_max": NAME_MAX,
                 "main_branch": settings.main_branch}
        system, user = render_prompt("estimate", self.repo, trajectory=trajectory,
                                     trajectory_fence=fence(trajectory.content),
                                     experiences=[shown(e) for e in relevant], rules=rules)
        out = await self.llm.generate("estimate", system, user, EstimateOutput)
        visible = {e.name for e in relevant}
        seen: set[str] = set()
        gradients: list[SemanticGradient] = []
        for edit in out.edits:
            try:
                request = self._request(edit, trajectory.uri, experience_set, visible, seen)
                gradient = await asyncio.to_thread(propose, self.repo, request)
            except InvalidInputError as exc:
                rejected.append(f"{edit.action} {edit.name!r}: {exc.message}")
                continue
            seen.add(gradient.target)
            gradients.append(to_semantic(gradient, trajectory.uri))
        return gradients

    @staticmethod
    def _request(edit: EstimatedEdit, uri: str, snapshot: Snapshot, visible: set[str],
                 seen: set[str]) -> GradientRequest:
        """The propose request for one edit, after the checks propose cannot make."""
        name = check_name(edit.name)
        if name in seen:
            raise InvalidInputError("a second edit of the same experience in one reply")
        if edit.action == "create" and name in snapshot:
            raise InvalidInputError("create of an experience that already exists")
        if edit.action != "create" and name not in snapshot:
            raise InvalidInputError(f"{edit.action} of an experience that does not exist")
        if edit.action != "create" and name not in visible:
            raise InvalidInputError(f"{edit.action} of an experience that was not shown "
                                    "(its current content was not considered)")
        if edit.action == "delete":
            return GradientRequest(name=name, delete=True, rationale=edit.rationale,
                                   evidence=[uri], confidence=edit.confidence)
        if edit.content is None or not edit.content.strip():
            raise InvalidInputError(f"{edit.action} without content")
        return GradientRequest(name=name, content=normalise_content(edit.content),
                               rationale=edit.rationale, evidence=[uri],
                               confidence=edit.confidence)
