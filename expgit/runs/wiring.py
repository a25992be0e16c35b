"""The real training components wired from a repository and an LLM runtime: the rollout
executor (single-turn, tool-calling, or routed by case) and the default pipeline of
docs/design.md.
The runs of :mod:`expgit.runs.build` and the services build on these."""

from __future__ import annotations

from typing import Protocol

from expgit.core.redaction.messages import Redactor
from expgit.llm.port import EmbeddingModel
from expgit.llm.structured import StructuredLLM
from expgit.outcomes.stats import experience_stats
from expgit.retrieval.relevance import EmbeddingRanker, ExperienceRanker
from expgit.retrieval.skill_listing import ListingMode
from expgit.store.format.provenance import Provenance
from expgit.store.format.settings import McpSettings
from expgit.store.repository import ExperienceRepository
from expgit.train.components.evaluator import RubricRolloutEvaluator
from expgit.train.components.executor import LOCAL_ROLLOUT_TOKENS, SingleTurnLLMRolloutExecutor
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.group_reflector import GroupReflector
from expgit.train.components.group_trainer import GroupPolicyTrainer
from expgit.train.components.llm_fields import (
    LOCAL_ANALYSIS_LIMITS,
    LOCAL_EDIT_LIMITS,
    LOCAL_RELEVANT_EXPERIENCES,
    LOCAL_SIMILAR_EXPERIENCES,
)
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.components.policy_trainer import BatchPolicyTrainer
from expgit.train.components.policy_updater import GitPolicyUpdater
from expgit.train.components.rollout_reflector import OneCallRolloutReflector
from expgit.train.components.snapshotter import ContentHashPolicySnapshotter
from expgit.train.components.tool_executor import (
    RoutingRolloutExecutor,
    ToolCallingRolloutExecutor,
)
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.engine import PolicyTrainingEngine
from expgit.train.interfaces import PolicyTrainer, RolloutExecutor
from expgit.train.measurement.candidate_stage import CandidateStage
from expgit.train.pipeline import (
    OfflinePolicyOptimizationPipeline,
    PipelineObserver,
)
from expgit.train.remote_push import RemotePublisher
from expgit.train.tools.environment import EnvironmentFactory


class LLMHandles(Protocol):
    """What the components need of an LLM runtime (an ``LLMRuntime``, or a test's own)."""

    @property
    def structured(self) -> StructuredLLM: ...

    @property
    def embeddings(self) -> EmbeddingModel | None: ...

    @property
    def description(self) -> str:
        """One line: the model and where it runs."""
        ...

    @property
    def is_local(self) -> bool:
        """The embedded model: tighter output bounds, smaller prompts."""
        ...

    @property
    def prompt_tokens(self) -> int | None:
        """The prompt size that fits the model's context with its reply; None: no limit."""
        ...


def rollout_executor(repo: ExperienceRepository, runtime: LLMHandles, *,
                     concurrency: int = 4, top_k: int | None = None,
                     token_budget: int | None = None,
                     tools: EnvironmentFactory | None = None,
                     user_llm: StructuredLLM | None = None) -> RoutingRolloutExecutor:
    """The in-process executor of the default chain (also the example environment's):
    single-turn, or tool-calling for the cases a cases file binds to a tool environment
    (``environment:``, limits from ``[train] tool_max_steps`` / ``tool_max_user_turns``;
    in the skills layout a skill listing and the ``Skill`` tool, :class:`ListingMode`);
    rubric-evaluated. Each prompt's experiences by
    :func:`expgit.retrieval.context.select_context` within the repository's ``[context]``
    settings (for the embedded model at most ``embedded_token_budget``), ``top_k`` and
    ``token_budget`` overriding them. ``tools`` (the tools of an MCP server,
    :func:`mcp_tools`): every case not bound to an environment runs as a tool-calling
    conversation with them."""
    embedded = runtime.is_local
    if token_budget is None:
        token_budget = repo.settings.context.budget_for(embedded)
    evaluator = RubricRolloutEvaluator(runtime.structured, repo=repo)
    single = SingleTurnLLMRolloutExecutor(
        runtime.structured, evaluator, top_k=top_k, token_budget=token_budget,
        concurrency=concurrency, repo=repo,
        reply_tokens=LOCAL_ROLLOUT_TOKENS if embedded else None)
    train = repo.settings.train
    tool_calling = ToolCallingRolloutExecutor(
        runtime.structured, evaluator, single.experiences_for,
        max_steps=train.tool_max_steps, max_user_turns=train.tool_max_user_turns,
        concurrency=concurrency, repo=repo, default=tools, user_llm=user_llm,
        listing=ListingMode.of(repo.settings, token_budget))
    return RoutingRolloutExecutor(single, tool_calling, every_case=tools is not None)


def build_pipeline(repo: ExperienceRepository, runtime: LLMHandles, *, concurrency: int = 4,
                   top_k: int | None = None, observer: PipelineObserver | None = None,
                   executor: RolloutExecutor | None = None,
                   publisher: RemotePublisher | None = None,
                   candidates: CandidateStage | None = None, group_size: int = 1,
                   provenance: Provenance | None = None,
                   tools: EnvironmentFactory | None = None,
                   user_llm: StructuredLLM | None = None
                   ) -> OfflinePolicyOptimizationPipeline:
    """The default chain of docs/design.md on ``repo``: single-turn executor with the rubric
    evaluator (unless another ``executor`` is given, e.g. a remote one), trajectory
    analyzer and gradient estimator (in one reflect call per rollout unless
    ``[train] calls_per_rollout`` is 2, or the model is the embedded one), patch-merge
    optimizer, git updater, batch trainer;
    relevance by embeddings when the runtime has them. With a ``publisher``, each
    update is pushed to its remote, and applied there in apply mode. ``group_size`` > 1:
    each training case runs that many times and a group trainer reflects on each group
    in one call (:mod:`expgit.train.components.group_trainer`). ``provenance``: the
    models, in the trailers of every gradient and proposal commit. ``tools``: the
    agent's tools from an MCP server (:func:`rollout_executor`)."""
    llm = runtime.structured
    ranker: ExperienceRanker | None = (EmbeddingRanker(runtime.embeddings)
                                      if runtime.embeddings is not None else None)
    redactor = Redactor(repo.settings.limits.max_message_chars)
    evaluator = RubricRolloutEvaluator(llm, repo=repo)
    if executor is None:
        executor = rollout_executor(repo, runtime, concurrency=concurrency, top_k=top_k,
                                    tools=tools, user_llm=user_llm)
    # The embedded model gets tighter output bounds and smaller prompts (its context is
    # 8k tokens and it is slow); API endpoints keep the components' defaults.
    local = runtime.is_local
    budget = runtime.prompt_tokens
    optimizer = PatchMergePolicyOptimizer(
        repo, llm, ranker, limits=LOCAL_EDIT_LIMITS if local else None,
        similar_experiences=LOCAL_SIMILAR_EXPERIENCES if local else 5, prompt_tokens=budget,
        redactor=redactor)
    updater = GitPolicyUpdater(repo, remote=publisher.remote if publisher else None,
                               provenance=provenance)
    engine = PolicyTrainingEngine(repo, optimizer, updater, publisher=publisher)
    analyzer = TrajectoryRolloutAnalyzer(
        repo, llm, evaluator, limits=LOCAL_ANALYSIS_LIMITS if local else None,
        prompt_tokens=budget, redactor=redactor)
    estimator = ExperienceGradientEstimator(
        repo, llm, ranker, relevant_experiences=LOCAL_RELEVANT_EXPERIENCES if local else None,
        limits=LOCAL_EDIT_LIMITS if local else None, prompt_tokens=budget,
        usage_stats=experience_stats, redactor=redactor, provenance=provenance)
    one_call = repo.settings.train.calls_for(embedded=local) == 1
    reflector = OneCallRolloutReflector(analyzer, estimator, llm) if one_call else None
    trainer: PolicyTrainer = BatchPolicyTrainer(analyzer, estimator, engine,
                                                concurrency=concurrency, reflector=reflector)
    if group_size > 1:
        trainer = GroupPolicyTrainer(GroupReflector(analyzer, estimator, llm), engine,
                                     group_size=group_size, concurrency=concurrency)
    return OfflinePolicyOptimizationPipeline(repo, ContentHashPolicySnapshotter(), executor,
                                             trainer, observer=observer,
                                             candidates=candidates, redactor=redactor,
                                             group_size=group_size)


def mcp_tools(repo: ExperienceRepository, settings: McpSettings | None
              ) -> EnvironmentFactory | None:
    """The tools of the MCP server of ``settings`` (``[agent.mcp]``, or the command
    line's), each result bounded by ``[limits] max_message_chars``; None without one.
    UsageError (exit 2) naming the install command if the mcp SDK is missing."""
    if settings is None:
        return None
    from expgit.train.tools.mcp_tools import McpToolFactory  # the SDK loads only here

    return McpToolFactory(settings, max_output_chars=repo.settings.limits.max_message_chars)
