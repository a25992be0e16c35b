"""expgit's public Python API: import from here, not from the modules behind it.

Every name is imported on first use (a module ``__getattr__``), so ``import expgit.api``
loads none of the store, HTTP, LLM-client or numeric stacks until a name is touched. The
design the names belong to is in ``docs/design.md``.

The repository
  ExperienceRepository -- an experience repository, bare or not: ``.open(path)``.

The workflow verbs (each is what one ``expgit`` command calls)
  GradientRequest -- one proposed edit of one experience, as ``propose`` takes it.
  propose -- commit a gradient on its own branch ``expgit/gradients/<id>`` (``expgit propose``).
  Gradient -- an open, applied or rejected gradient, as ``propose`` and ``list_gradients`` give it.
  list_gradients -- the gradients in the given states (``expgit gradients``).
  merge -- merge open gradients into one proposal branch (``expgit merge``).
  Proposal -- a proposal: merged gradients plus a PR description, based on a ``main`` commit.
  list_proposals -- the proposals in the given states (``expgit proposals``).
  apply_proposal -- apply a proposal to ``main`` by compare-and-swap (``expgit apply``).
  ApplyResult -- what ``apply_proposal`` did: the new ``main`` commit, fast-forward or rebased.
  revert -- a new commit on ``main`` that undoes an applied commit (``expgit revert``).
  RevertResult -- what ``revert`` wrote.
  find_any -- the gradient or proposal with this id, in any state (``expgit review``).
  read_note -- the rejection reason kept as a git note on a commit, if any.
  reject -- close a gradient or proposal with a reason (``expgit reject``).
  validate_commit -- the problems of the experience files in a commit (``expgit validate``).
  require_valid -- raise ValidationError when ``validate_commit`` found problems.
  export_skills -- write the active skills into another project's folder (``expgit export``).
  ExportResult -- what ``export_skills`` wrote and removed.
  migrate_to_skills -- the proposal moving a flat repository to skills (``expgit migrate``).

Context for an agent
  context_for -- the experiences to show for a query, on a repository or path (``expgit context``).
  select_context -- the same selection from a snapshot already read.
  ContextSelection -- a selection: ``.items``, ``.markdown()``, ``.as_json()``.
  ContextItem -- one selected experience: name, reason, score, tokens, blob.

Tools and environments
  registry -- the environment kinds a cases file can name (``registry.register(kind)``).
  Tool -- one tool: name, description, pydantic argument model and the function it runs.
  ToolError -- raised by a tool; the agent sees its message as the tool's error result.
  StateFactory -- an environment factory: tools over a fresh copy of a state per rollout.
  read_json -- a JSON database fixture, read as an environment's initial state.
  ToolEnvironment -- Protocol: ``tool_schemas()``, ``execute(name, arguments)``, ``final_state()``.
  EnvironmentFactory -- Protocol: tool names, initial state, a ToolEnvironment per ``new()``.
  EnvironmentKind -- Protocol: a named kind that opens a database into an EnvironmentFactory.
  McpToolFactory -- an EnvironmentFactory whose tools are served by an MCP server (stdio).

Remote services
  Environment -- Protocol of a runtime the SDK serves: describe, query_cases, run_rollout.
  create_environment_app -- the ASGI app that serves an Environment as an environment service.
  CaseQuery -- which cases an environment service is asked for.
  RolloutRequest -- one rollout an environment service is asked to run.
  Health -- an environment service's name, version and metadata.
  RemoteTrainingPolicyTrainer -- a PolicyTrainer that posts rollouts to ``expgit serve``.
  FeedbackOutcomeEvaluator -- a rollout evaluator for recorded sessions with user feedback.

The training domain
  Case -- a training or evaluation sample: input, rubric, metadata.
  Rubric -- a case's acceptance criteria.
  RubricCriterion -- one criterion of a rubric.
  RubricEvaluation -- how one rollout scored against its case's rubric.
  Message -- one message of a rollout: role and parts.
  TextPart -- the text part of a message.
  ToolPart -- a tool call and its result, kept apart from text.
  Rollout -- one execution of a policy snapshot on a case: messages, evaluation, error.
  Trajectory -- the trainable document analysed from a rollout.
  SemanticGradient -- a proposed before/after change of one experience, with rationale and evidence.

Settings
  Settings -- the model of ``expgit.toml``.
  parse_settings -- ``expgit.toml`` text -> Settings, or InvalidInputError naming the key.
  LLMSettings -- the ``[llm]`` table: endpoint, model, limits.
  McpSettings -- an MCP server's command, arguments and state-key argument.

Errors (each kind has its exit code; ``exit_codes()`` lists them)
  ExpgitError -- the base of every error expgit raises on purpose (exit 1 unless a kind says).
  UsageError -- a command or call used wrongly (exit 2).
  InvalidInputError -- input that does not parse or is out of bounds (exit 5).
  ValidationError -- experience files that fail validation (exit 5).
  NotFoundError -- an id, name or ref that does not exist (exit 5).
  NotRegularFileError -- a path that is not a regular file (exit 5).
  ConflictError -- the repository moved under the change; nothing was written (exit 3).
  LockHeldError -- another expgit writer holds the lock (exit 4).
  GateError -- a proposal the regression gate did not pass; it stays open (exit 6).
  RunErrorsError -- a run that finished with failed rollouts or calls (exit 7).
  ToolServerError -- a tool server that failed to start, died or timed out (exit 7).
  GitError -- a git command failed in a way expgit did not expect (exit 1).
  exit_codes -- exit code -> the kind of error it means.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from expgit.core.domain import (
        Case,
        Message,
        Rollout,
        Rubric,
        RubricCriterion,
        RubricEvaluation,
        SemanticGradient,
        TextPart,
        ToolPart,
        Trajectory,
    )
    from expgit.errors import (
        ConflictError,
        ExpgitError,
        GateError,
        GitError,
        InvalidInputError,
        LockHeldError,
        NotFoundError,
        NotRegularFileError,
        RunErrorsError,
        ToolServerError,
        UsageError,
        ValidationError,
        exit_codes,
    )
    from expgit.outcomes.feedback import FeedbackOutcomeEvaluator
    from expgit.remote.protocol import CaseQuery, Health, RolloutRequest
    from expgit.remote.sdk import Environment, create_environment_app
    from expgit.remote.training_client import RemoteTrainingPolicyTrainer
    from expgit.retrieval.context import ContextItem, ContextSelection, context_for, select_context
    from expgit.store.format.settings import LLMSettings, McpSettings, Settings, parse_settings
    from expgit.store.format.validate import require_valid, validate_commit
    from expgit.store.migrate import migrate_to_skills
    from expgit.store.repository import ExperienceRepository
    from expgit.store.skill_export import ExportResult, export_skills
    from expgit.store.workflow.apply import ApplyResult, apply_proposal
    from expgit.store.workflow.gradients import Gradient, GradientRequest, list_gradients, propose
    from expgit.store.workflow.proposals import Proposal, list_proposals, merge
    from expgit.store.workflow.revert import RevertResult, revert
    from expgit.store.workflow.review import find_any, read_note, reject
    from expgit.train.tools import registry
    from expgit.train.tools.environment import (
        EnvironmentFactory,
        EnvironmentKind,
        StateFactory,
        Tool,
        ToolEnvironment,
        ToolError,
        read_json,
    )
    from expgit.train.tools.mcp_tools import McpToolFactory

# Where each public name lives (the module it is imported from on first use).
_HOMES: dict[str, tuple[str, ...]] = {
    "expgit.store.repository": ("ExperienceRepository",),
    "expgit.store.workflow.gradients": ("GradientRequest", "propose", "Gradient", "list_gradients"),
    "expgit.store.workflow.proposals": ("merge", "Proposal", "list_proposals"),
    "expgit.store.workflow.apply": ("apply_proposal", "ApplyResult"),
    "expgit.store.workflow.revert": ("revert", "RevertResult"),
    "expgit.store.workflow.review": ("find_any", "read_note", "reject"),
    "expgit.store.format.validate": ("validate_commit", "require_valid"),
    "expgit.store.skill_export": ("export_skills", "ExportResult"),
    "expgit.store.migrate": ("migrate_to_skills",),
    "expgit.retrieval.context": ("context_for", "select_context", "ContextSelection",
                               "ContextItem"),
    "expgit.train.tools": ("registry",),
    "expgit.train.tools.environment": ("Tool", "ToolError", "StateFactory", "read_json",
                                       "ToolEnvironment", "EnvironmentFactory",
                                       "EnvironmentKind"),
    "expgit.train.tools.mcp_tools": ("McpToolFactory",),
    "expgit.remote.sdk": ("Environment", "create_environment_app"),
    "expgit.remote.protocol": ("CaseQuery", "RolloutRequest", "Health"),
    "expgit.remote.training_client": ("RemoteTrainingPolicyTrainer",),
    "expgit.outcomes.feedback": ("FeedbackOutcomeEvaluator",),
    "expgit.core.domain": ("Case", "Rubric", "RubricCriterion", "RubricEvaluation",
                            "Message", "TextPart", "ToolPart", "Rollout", "Trajectory",
                            "SemanticGradient"),
    "expgit.store.format.settings": ("Settings", "parse_settings", "LLMSettings", "McpSettings"),
    "expgit.errors": ("ExpgitError", "UsageError", "InvalidInputError", "ValidationError",
                      "NotFoundError", "NotRegularFileError", "ConflictError",
                      "LockHeldError", "GateError", "RunErrorsError", "ToolServerError",
                      "GitError", "exit_codes"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "ApplyResult",
    "Case",
    "CaseQuery",
    "ConflictError",
    "ContextItem",
    "ContextSelection",
    "Environment",
    "EnvironmentFactory",
    "EnvironmentKind",
    "ExperienceRepository",
    "ExpgitError",
    "ExportResult",
    "FeedbackOutcomeEvaluator",
    "GateError",
    "GitError",
    "Gradient",
    "GradientRequest",
    "Health",
    "InvalidInputError",
    "LLMSettings",
    "LockHeldError",
    "McpSettings",
    "McpToolFactory",
    "Message",
    "NotFoundError",
    "NotRegularFileError",
    "Proposal",
    "RemoteTrainingPolicyTrainer",
    "RevertResult",
    "Rollout",
    "RolloutRequest",
    "Rubric",
    "RubricCriterion",
    "RubricEvaluation",
    "RunErrorsError",
    "SemanticGradient",
    "Settings",
    "StateFactory",
    "TextPart",
    "Tool",
    "ToolEnvironment",
    "ToolError",
    "ToolPart",
    "ToolServerError",
    "Trajectory",
    "UsageError",
    "ValidationError",
    "apply_proposal",
    "context_for",
    "create_environment_app",
    "exit_codes",
    "export_skills",
    "find_any",
    "list_gradients",
    "list_proposals",
    "merge",
    "migrate_to_skills",
    "parse_settings",
    "propose",
    "read_json",
    "read_note",
    "registry",
    "reject",
    "require_valid",
    "revert",
    "select_context",
    "validate_commit",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'expgit.api' has no attribute {name!r}")
    home = importlib.import_module(module)
    # a name that is a sub-module (``registry``) is imported as one
    value = (getattr(home, name) if hasattr(home, name)
             else importlib.import_module(f"{module}.{name}"))
    globals()[name] = value  # imported once: the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
