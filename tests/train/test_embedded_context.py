"""The embedded model's rollouts see at most ``[context] embedded_token_budget`` tokens
of experiences; an endpoint's see ``[context] token_budget``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from conftest import EXAMPLE

from expgit.llm.port import EmbeddingModel, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.runs.build import rollout_executor
from expgit.store.repository import ExperienceRepository
from expgit.store.settings import ContextSettings, parse_settings
from expgit.train.cases import load_cases
from expgit.train.context import ExecutionContext


@dataclass
class Handles:
    structured: StructuredLLM
    is_local: bool
    embeddings: EmbeddingModel | None = None


def shown_tokens(repo: ExperienceRepository, is_local: bool) -> int:
    """The estimated tokens of experiences one eval case's rollout showed."""
    case = load_cases(EXAMPLE / "cases" / "eval.yaml")[0]
    chat = ScriptedChatModel([Step("rollout", "You can cancel it within 24 hours.")])
    handles = Handles(StructuredLLM(chat, UsageMeter()), is_local)
    executor = rollout_executor(repo, handles, concurrency=1)
    [rollout] = asyncio.run(executor.execute([case], repo.snapshot(),
                                             ExecutionContext(policy_snapshot_id="p")))
    chat.assert_done()
    assert rollout.error is None
    tokens = rollout.metadata["context_tokens"]
    assert isinstance(tokens, int) and tokens > 0
    return tokens


def test_the_embedded_model_reads_a_smaller_context(
        seeded_repo: ExperienceRepository) -> None:
    embedded, endpoint = shown_tokens(seeded_repo, True), shown_tokens(seeded_repo, False)
    assert embedded <= ContextSettings().embedded_token_budget < endpoint


def test_the_budgets_come_from_the_settings() -> None:
    context = parse_settings("[context]\ntoken_budget = 600\n"
                             "embedded_token_budget = 900\n").context
    assert (context.budget_for(embedded=True), context.budget_for(embedded=False)) == (600,
                                                                                     600)
    wide = parse_settings("[context]\nembedded_token_budget = 3000\n").context
    assert (wide.budget_for(embedded=True), wide.budget_for(embedded=False)) == (3000, 4000)
