"""SingleTurnLLMRolloutExecutor: one LLM reply per case, the experiences as system prompt."""

from __future__ import annotations

from collections.abc import Sequence

from expgit.core.domain import Case, FreeMetadata, Message, Rollout
from expgit.errors import ExpgitError, UsageError
from expgit.llm.port import ChatMessages
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.context import ContextItem, ContextSelection, check_limits, select_context
from expgit.retrieval.usage import KEY as USAGE_KEY
from expgit.retrieval.usage import usage_records
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.components.evaluator import failed_evaluation, user_turn
from expgit.train.context import ExecutionContext, PipelineContext, gather_bounded
from expgit.train.groups import sampling_of
from expgit.train.interfaces import RolloutEvaluator

# The embedded model's rollout replies stop here and are graded as written: its answers
# take about 150 tokens, and when it rambles on past them (measured on the demo cases:
# to the 2048-token reply cap) the rest is not an answer, only minutes of CPU.
LOCAL_ROLLOUT_TOKENS = 512


class SingleTurnLLMRolloutExecutor:
    """Runs each case as one ``rollout`` LLM call and evaluates it with ``evaluator``.

    System prompt (``prompts/rollout.md.j2``): the experiences
    :func:`expgit.retrieval.context.select_context` picks for the user turn within
    ``token_budget`` and ``top_k`` (default: the repository's ``[context]`` settings):
    the always-on ones, then the most relevant by BM25 that fit; drafts, deprecated and
    invalid files are never shown. User turn: the case's ``user_query``, else its input as
    JSON. Messages recorded: [user, assistant]; metadata: ``experiences_used``
    (``[{"name", "blob", "reason", "score"}]``, the experiences shown, in prompt order; the
    blob pins the version), ``context_tokens`` (their estimated tokens), ``snapshot_id``
    and ``snapshot_commit`` of the policy set. Always-on experiences over the budget are
    refused before any case runs (UsageError). At most ``concurrency`` cases run at once.
    ``reply_tokens``: each reply stops there and is graded as written, ``reply_cut_at``
    in its metadata (the embedded model's rollouts); None: the model's reply cap, where a
    reply cut off is a failed rollout.
    A case whose call or evaluation fails (ExpgitError, e.g. LLMError; or a timeout)
    becomes a Rollout with ``error`` and a failed evaluation. Reads only; never writes.
    """

    def __init__(self, llm: StructuredLLM, evaluator: RolloutEvaluator, *,
                 top_k: int | None = None, token_budget: int | None = None,
                 concurrency: int = 4, repo: ExperienceRepository | None = None,
                 reply_tokens: int | None = None) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, not {concurrency}")
        settings = repo.settings.context if repo is not None else None
        if token_budget is None and settings is not None:
            token_budget = settings.token_budget
        if top_k is None and settings is not None:
            top_k = settings.top_k
        self.token_budget, self.top_k = check_limits(token_budget, top_k)
        self.llm = llm
        self.evaluator = evaluator
        self.concurrency = concurrency
        self.repo = repo
        self.reply_tokens = reply_tokens

    async def execute(self, cases: Sequence[Case], policy_set: Snapshot,
                      context: ExecutionContext) -> list[Rollout]:
        self._select(policy_set, "")  # always-on experiences over the budget: refused now
        pipeline = PipelineContext()

        async def run(case: Case) -> Rollout:
            rollout = await self._run_case(case, policy_set, context, pipeline)
            if context.rollout_done is not None:
                context.rollout_done()
            return rollout

        return await gather_bounded(self.concurrency, map(run, cases))

    def _select(self, policy_set: Snapshot, query: str) -> ContextSelection:
        return select_context(policy_set, query, token_budget=self.token_budget,
                              top_k=self.top_k)

    async def experiences_for(self, query: str, policy_set: Snapshot) -> list[ContextItem]:
        """The experiences a prompt shows for ``query``, as this executor picks them
        (also the tool-calling executor's experience block)."""
        return self._select(policy_set, query).items

    async def _run_case(self, case: Case, policy_set: Snapshot, context: ExecutionContext,
                        pipeline: PipelineContext) -> Rollout:
        query = user_turn(case)
        metadata: FreeMetadata = {"snapshot_id": policy_set.id,
                                       "snapshot_commit": policy_set.commit}
        messages: list[Message] = []
        try:
            selection = self._select(policy_set, query)
            metadata[USAGE_KEY] = usage_records(selection.usage())
            metadata["context_tokens"] = selection.tokens
            system, user = render_prompt("rollout", self.repo, experiences=selection.items,
                                         user_input=query, case=case)
            messages.append(Message.text("user", user))
            prompt: ChatMessages = [{"role": "system", "content": system},
                                    {"role": "user", "content": user}]
            sampling = sampling_of(case)  # a group's run: its own
            if self.reply_tokens is None:
                answer = await self.llm.text("rollout", prompt, sampling)
            else:
                answer, cut = await self.llm.capped_text("rollout", prompt, self.reply_tokens,
                                                         sampling)
                if cut:
                    metadata["reply_cut_at"] = self.reply_tokens
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
