"""The embedded model's rollouts see at most ``[context] embedded_token_budget`` tokens
of experiences; an endpoint's see ``[context] token_budget``. The run's estimate counts
the same. The embedded model's rollout replies stop at LOCAL_ROLLOUT_TOKENS and are
graded as written."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from conftest import EXAMPLE

from expgit.llm.factory import LLMRuntime, ResolvedLLM
from expgit.llm.port import ChatMessages, Completion, EmbeddingModel, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.runs.budget import COMPLETION_TOKENS, PROMPT_OVERHEAD_TOKENS, estimate, train_plan
from expgit.runs.wiring import rollout_executor
from expgit.store.format.experience import estimate_tokens, tokens_of_bytes
from expgit.store.format.settings import ContextSettings, LLMSettings, parse_settings
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases
from expgit.train.components.executor import LOCAL_ROLLOUT_TOKENS
from expgit.train.context import ExecutionContext


@dataclass
class Handles:
    structured: StructuredLLM
    is_local: bool
    embeddings: EmbeddingModel | None = None
    prompt_tokens: int | None = None
    description: str = ""


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


def test_the_estimate_counts_the_context_the_model_gets(
        seeded_repo: ExperienceRepository) -> None:
    cases = load_cases(EXAMPLE / "cases" / "eval.yaml")

    def estimated(choice: str) -> tuple[int, int]:
        runtime = LLMRuntime(LLMSettings(), ResolvedLLM(
            "local" if choice == "local" else "openai", "m", None, None, "json_object"),
            UsageMeter())
        plan = train_plan(seeded_repo, cases[:2], cases[2:4], epochs=1, batch_size=None,
                          measure=True, rollouts_here=True)
        result = estimate(plan, runtime, None)
        return result.calls, result.prompt_tokens

    (local_calls, local_tokens), (calls, tokens) = estimated("local"), estimated("openai")
    # 2 baseline + 2 train + 2 candidate rollouts (the final eval of the unchanged main
    # reuses the baseline's), 1 merge; the embedded model trains in 2 calls per rollout,
    # an endpoint in 1
    assert (local_calls, calls) == (11, 9)
    shown = sum(tokens_of_bytes(len(e.data)) for e in seeded_repo.snapshot().entries.values())
    assert shown > 800  # the example's experiences do not fit the embedded budget
    # without the experiences, the embedded model's prompts are the endpoint's plus one
    # more training prompt per trained rollout
    trained = sum(estimate_tokens(json.dumps(case.input)) + PROMPT_OVERHEAD_TOKENS
                  + COMPLETION_TOKENS for case in cases[:2])
    assert (local_tokens - 800 * local_calls) - (tokens - shown * calls) == trained


@dataclass
class Rambling:
    """A model that always talks until the reply cap; records the caps it was given."""

    model: str = "rambling"
    caps: list[int] | None = None

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, object] | None, max_tokens: int,
                       temperature: float, seed: int | None = None) -> Completion:
        assert stage == "rollout" and response_format is None
        self.caps = [*(self.caps or []), max_tokens]
        return Completion(text="You can cancel it within 24 hours, and then you can",
                          finish_reason="length", model=self.model, prompt_tokens=900,
                          completion_tokens=max_tokens)


def test_an_embedded_rollout_at_the_reply_cap_is_graded_as_written(
        seeded_repo: ExperienceRepository) -> None:
    case = load_cases(EXAMPLE / "cases" / "eval.yaml")[0]  # eligible, cites 24 hours
    rollouts = {}
    for embedded in (True, False):
        model = Rambling()
        meter = UsageMeter()
        executor = rollout_executor(seeded_repo, Handles(StructuredLLM(model, meter),
                                                         embedded), concurrency=1)
        [rollouts[embedded]] = asyncio.run(executor.execute(
            [case], seeded_repo.snapshot(), ExecutionContext(policy_snapshot_id="p")))
        assert model.caps == ([LOCAL_ROLLOUT_TOKENS] if embedded else [2048])
        assert meter.total().calls == 1
        assert (meter.failures() == []) is embedded  # a failed call only on the endpoint
    local, endpoint = rollouts[True], rollouts[False]
    assert local.error is None and local.metadata["reply_cut_at"] == LOCAL_ROLLOUT_TOKENS
    assert local.evaluation is not None and local.evaluation.passed
    assert endpoint.error is not None and "cut off at 2048 tokens" in endpoint.error
    assert "reply_cut_at" not in endpoint.metadata
