"""SingleTurnLLMRolloutExecutor: one LLM reply per case, the experiences as system prompt."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from expgit.errors import ExpgitError, InvalidInputError, UsageError
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository
from expgit.store.snapshot import ExperienceEntry, Snapshot
from expgit.store.templates import render_prompt
from expgit.train.components.evaluator import failed_evaluation, user_turn
from expgit.train.context import ExecutionContext, PipelineContext
from expgit.train.domain import Case, Message, Rollout
from expgit.train.experience_usage import KEY as USAGE_KEY
from expgit.train.experience_usage import UsedExperience, usage_records
from expgit.train.interfaces import RolloutEvaluator
from expgit.train.relevance import ExperienceRanker, LexicalRanker


@dataclass(frozen=True)
class PromptExperience:
    """What the rollout prompt shows of one experience."""

    name: str
    summary: str
    body: str
    blob: str  # the file's blob id: the version shown


def _prompt_experience(entry: ExperienceEntry) -> PromptExperience | None:
    """The entry as shown to the agent, or None if it is not an active, valid experience."""
    try:
        exp = entry.experience
    except InvalidInputError:
        return None
    if exp.status != "active":
        return None
    return PromptExperience(entry.name, exp.front_matter.summary, exp.body, entry.blob)


class SingleTurnLLMRolloutExecutor:
    """Runs each case as one ``rollout`` LLM call and evaluates it with ``evaluator``.

    System prompt (``prompts/rollout.md.j2``): the snapshot's active experiences, all of
    them by name, or, with ``top_k``, the ``top_k`` most relevant to the user turn by
    ``ranker`` (lexical by default), best first; drafts, deprecated and invalid files are
    never shown. User turn: the case's ``user_query``, else its input as JSON. Messages
    recorded: [user, assistant]; metadata: ``experiences_used`` (``[{"name", "blob"}]``,
    the experiences shown, in prompt order; the blob pins the version), ``snapshot_id``
    and ``snapshot_commit`` of the policy set. At most ``concurrency`` cases run at once.
    A case whose call or evaluation fails (ExpgitError, e.g. LLMError; or a timeout)
    becomes a Rollout with ``error`` and a failed evaluation. Reads only; never writes.
    """

    def __init__(self, llm: StructuredLLM, evaluator: RolloutEvaluator, *,
                 ranker: ExperienceRanker | None = None, top_k: int | None = None,
                 concurrency: int = 4, repo: ExperienceRepository | None = None) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, not {concurrency}")
        if top_k is not None and top_k < 0:
            raise UsageError(f"top_k must be 0 or more, not {top_k}")
        self.llm = llm
        self.evaluator = evaluator
        self.ranker: ExperienceRanker = ranker or LexicalRanker()
        self.top_k = top_k
        self.concurrency = concurrency
        self.repo = repo

    async def execute(self, cases: Sequence[Case], policy_set: Snapshot,
                      context: ExecutionContext) -> list[Rollout]:
        semaphore = asyncio.Semaphore(self.concurrency)
        everything: list[PromptExperience] | None = None
        if self.top_k is None:
            shown = (_prompt_experience(policy_set.entries[n]) for n in policy_set.names())
            everything = [p for p in shown if p is not None]
        pipeline = PipelineContext(execution_metadata=dict(context.metadata))

        async def run(case: Case) -> Rollout:
            async with semaphore:
                rollout = await self._run_case(case, policy_set, context, pipeline,
                                               everything)
            if context.rollout_done is not None:
                context.rollout_done()
            return rollout

        return list(await asyncio.gather(*(run(case) for case in cases)))

    async def _relevant(self, query: str, policy_set: Snapshot, top_k: int
                        ) -> list[PromptExperience]:
        if top_k == 0:
            return []
        # rank everything, then keep the top_k active ones (the ranker keeps drafts)
        ranked = await self.ranker.rank(query, policy_set, len(policy_set.entries))
        shown = [p for p in map(_prompt_experience, ranked) if p is not None]
        return shown[:top_k]

    async def _run_case(self, case: Case, policy_set: Snapshot, context: ExecutionContext,
                        pipeline: PipelineContext,
                        everything: list[PromptExperience] | None) -> Rollout:
        query = user_turn(case)
        metadata: dict[str, object] = {"snapshot_id": policy_set.id,
                                       "snapshot_commit": policy_set.commit}
        messages: list[Message] = []
        try:
            experiences = everything if everything is not None else \
                await self._relevant(query, policy_set, self.top_k or 0)
            metadata[USAGE_KEY] = usage_records(
                [UsedExperience(name=p.name, blob=p.blob) for p in experiences])
            system, user = render_prompt("rollout", self.repo, experiences=experiences,
                                         user_input=query, case=case)
            messages.append(Message.text("user", user))
            answer = await self.llm.text("rollout", [{"role": "system", "content": system},
                                                     {"role": "user", "content": user}])
            messages.append(Message.text("assistant", answer))
            rollout = Rollout(case=case, messages=messages, metadata=metadata,
                              policy_snapshot_id=context.policy_snapshot_id)
            rollout.evaluation = await self.evaluator.evaluate(rollout, pipeline)
            return rollout
        except (ExpgitError, TimeoutError) as exc:
            stage = "evaluation" if len(messages) == 2 else "rollout"
            error = f"{stage} failed: {type(exc).__name__}: {exc}"
            return Rollout(case=case, messages=messages, metadata=metadata, error=error,
                           policy_snapshot_id=context.policy_snapshot_id,
                           evaluation=failed_evaluation(case, error))
