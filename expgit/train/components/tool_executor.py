"""ToolCallingRolloutExecutor: a multi-turn conversation with tool calls, per case.

A case bound to a tool environment (``metadata.environment``, see
:mod:`expgit.train.tools.binding`) runs as a conversation: the experiences as the system
prompt (``prompts/tool_rollout.md.j2``; the same selection as the single-turn
executor's), the user's turns from the case or a simulated user
(:mod:`expgit.train.tools.users`), and agent turns (one ``rollout`` call each, with the
environment's tools) until the agent answers and the user is done, or
``max_steps`` agent turns, or ``max_user_turns`` user turns (an environment's
:class:`~expgit.train.tools.environment.Conversation` may set its own limits, its
agent instructions and the agent's greeting; the user may have its own model,
``user_llm``). Every tool call is a
ToolPart of its assistant message with its result; a call of an unknown tool, with
arguments that are not a JSON object or fail the tool's schema, or whose tool raises,
gets an error result (``tool_status: error``) that the agent sees. The environment is
fresh per rollout; its final state is ``metadata.final_state``, and
``metadata.stopped`` says why the conversation ended (``user done``, ``step limit``,
``user turn limit``). A failed LLM call or evaluation is a Rollout with ``error``,
and so is an environment that itself breaks (:class:`~expgit.errors.ToolServerError`: an
MCP server that died, hung or answered garbage). With a ``default`` environment factory
(tools from an MCP server, :mod:`expgit.train.tools.mcp_tools`), a case bound to no
environment runs against it, and a bound environment that can take its tools from
there (tau2's, :meth:`~expgit.train.tau2.environment.Tau2Factory.with_tools`) does
(``metadata.tools: mcp``); the others keep their own. The environment's methods are
called off the event loop (they may wait for a server), and its ``close()``, if it has
one, when the rollout ends.

With ``listing`` (``[agent] skills = "listing"``, docs/skill-listing.md) the system
prompt holds the always-on skills and the ``<available_skills>`` listing of the others
(:mod:`expgit.retrieval.skill_listing`) instead of a retrieval, and the environment gets the
built-in ``Skill`` tool (:mod:`expgit.train.tools.skill_tool`): the agent reads a skill's
body only by calling it. The rollout records ``skills_listed`` and ``skills_loaded``,
and its ``experiences_used`` are the always-on skills and the loaded ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from expgit.core.domain import Case, FreeMetadata, Message, Part, Rollout, TextPart, ToolPart
from expgit.core.jsonl import loads_untrusted
from expgit.errors import ExpgitError, ToolServerError, UsageError
from expgit.llm.port import ToolCall, ToolMessages
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.context import ContextItem
from expgit.retrieval.skill_listing import ListingMode, SkillListing
from expgit.retrieval.usage import KEY as USAGE_KEY
from expgit.retrieval.usage import UsedExperience, usage_records
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.components.evaluator import failed_evaluation
from expgit.train.context import ExecutionContext, PipelineContext, gather_bounded
from expgit.train.groups import sampling_of
from expgit.train.interfaces import RolloutEvaluator, RolloutExecutor
from expgit.train.tools.binding import binding
from expgit.train.tools.environment import (
    Conversation,
    EnvironmentFactory,
    ToolEnvironment,
    close_environment,
    conversation_of,
    served_by,
)
from expgit.train.tools.registry import open_environment
from expgit.train.tools.skill_tool import SkillToolEnvironment
from expgit.train.tools.users import Turn, check_user_input, user_for

ExperienceSelector = Callable[[str, Snapshot], Awaitable[list[ContextItem]]]
LOADED = "loaded with the Skill tool"  # the reason of a loaded skill's usage record


def run_tool_call(env: ToolEnvironment, known: set[str], call: ToolCall) -> ToolPart:
    """The call run against ``env``, as a ToolPart with its result or its error."""
    try:
        args: Any = loads_untrusted(call.arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return ToolPart(tool_id=call.id, tool_name=call.name,
                        tool_input={"_raw": call.arguments}, tool_status="error",
                        tool_output="error: the arguments are not a JSON object")
    if call.name not in known:
        return ToolPart(tool_id=call.id, tool_name=call.name, tool_input=args,
                        tool_status="error", tool_output=f"error: unknown tool {call.name!r}"
                        f"; the tools are {', '.join(sorted(known))}")
    try:
        output = env.execute(call.name, args)
    except ToolServerError:
        raise  # the environment broke: the rollout ends with the cause
    except Exception as exc:  # any failure of the tool is the agent's to see, not a crash
        return ToolPart(tool_id=call.id, tool_name=call.name, tool_input=args,
                        tool_status="error", tool_output=f"error: {exc}")
    return ToolPart(tool_id=call.id, tool_name=call.name, tool_input=args,
                    tool_output=output)


def _assistant_message(text: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": c.arguments}} for c in calls]
    else:
        message["content"] = text
    return message


class ToolCallingRolloutExecutor:
    """Runs each case as a tool-calling conversation (module docstring); at most
    ``concurrency`` at once. ``experiences(query, snapshot)`` picks the experiences
    shown for the user's first message. Reads only; never writes."""

    def __init__(self, llm: StructuredLLM, evaluator: RolloutEvaluator,
                 experiences: ExperienceSelector, *, max_steps: int = 30,
                 max_user_turns: int = 10, concurrency: int = 4,
                 repo: ExperienceRepository | None = None,
                 default: EnvironmentFactory | None = None,
                 user_llm: StructuredLLM | None = None,
                 listing: ListingMode | None = None) -> None:
        if concurrency < 1 or max_steps < 1 or max_user_turns < 1:
            raise UsageError("concurrency, max_steps and max_user_turns must be at least 1")
        self.llm = llm
        self.evaluator = evaluator
        self.experiences = experiences
        self.max_steps = max_steps
        self.max_user_turns = max_user_turns
        self.concurrency = concurrency
        self.repo = repo
        self.default = default
        self.user_llm = user_llm  # the simulated user's model; None: ``llm``
        self.listing = listing

    async def execute(self, cases: Sequence[Case], policy_set: Snapshot,
                      context: ExecutionContext) -> list[Rollout]:
        pipeline = PipelineContext()
        return await gather_bounded(self.concurrency, (
            self._run_case(case, policy_set, context, pipeline) for case in cases))

    async def _run_case(self, case: Case, policy_set: Snapshot, context: ExecutionContext,
                        pipeline: PipelineContext) -> Rollout:
        metadata: FreeMetadata = {"snapshot_id": policy_set.id,
                                    "snapshot_commit": policy_set.commit}
        messages: list[Message] = []
        stage = "rollout"
        try:
            bound = binding(case)
            if bound is None and self.default is None:
                raise UsageError(f"case {case.name!r} is not bound to a tool environment")
            factory = open_environment(*bound) if bound is not None else self.default
            assert factory is not None
            if bound is None:
                check_user_input(case, f"case {case.name!r}")
            metadata["environment"] = bound[0] if bound is not None else "mcp"
            served = served_by(factory, self.default) if bound is not None else None
            if served is not None:  # the bound environment's tools from the MCP server
                factory = served
                metadata["tools"] = "mcp"
            env: ToolEnvironment = factory.new()
            conversation = conversation_of(factory)
            listing = self.listing.listing(policy_set) if self.listing else None
            skill_env = None
            if listing is not None:
                env = skill_env = SkillToolEnvironment(env, {
                    n: (s.location, s.body) for n, s in listing.skills.items()})
            try:
                metadata["stopped"] = await self._converse(
                    case, policy_set, env, messages, metadata,
                    conversation, listing)
                metadata["final_state"] = await asyncio.to_thread(env.final_state)
            finally:
                await asyncio.to_thread(close_environment, env)
            rollout = Rollout(case=case, messages=messages, metadata=metadata,
                              policy_snapshot_id=context.policy_snapshot_id)
            if listing is not None and skill_env is not None:
                rollout.skills_listed = list(listing.listed)
                rollout.skills_loaded = list(skill_env.loaded)
                metadata[USAGE_KEY] = usage_records(
                    [i.usage() for i in listing.always]
                    + [UsedExperience(name=n, blob=listing.skills[n].blob, reason=LOADED)
                       for n in skill_env.loaded])
            stage = "evaluation"
            rollout.evaluation = await self.evaluator.evaluate(rollout, pipeline)
            return rollout
        except (ExpgitError, TimeoutError) as exc:
            error = f"{stage} failed: {type(exc).__name__}: {exc}"
            return Rollout(case=case, messages=messages, metadata=metadata, error=error,
                           policy_snapshot_id=context.policy_snapshot_id,
                           evaluation=failed_evaluation(case, error))

    async def _converse(self, case: Case, policy_set: Snapshot, env: ToolEnvironment,
                        messages: list[Message], metadata: FreeMetadata,
                        conversation: Conversation,
                        listing: SkillListing | None = None) -> str:
        """Runs the conversation into ``messages``; returns why it stopped."""
        user = user_for(case, self.user_llm or self.llm, self.repo)
        max_steps = conversation.max_steps or self.max_steps
        max_user_turns = conversation.max_user_turns or self.max_user_turns
        transcript: list[Turn] = []
        opening: ToolMessages = []
        if conversation.greeting:
            opening.append({"role": "assistant", "content": conversation.greeting})
            messages.append(Message.text("assistant", conversation.greeting))
            transcript.append(Turn("agent", conversation.greeting))
        said = await user.next_message(transcript)
        if said is None:
            return "user done"
        experiences = (listing.always if listing is not None
                       else await self.experiences(said, policy_set))
        metadata[USAGE_KEY] = usage_records(
            [p.usage() for p in experiences])
        # the environment's clock, if it has one
        now = (await asyncio.to_thread(env.final_state)).get("now")
        system, _ = render_prompt("tool_rollout", self.repo, experiences=experiences,
                                  case=case, now=now if isinstance(now, str) else None,
                                  instructions=conversation.instructions,
                                  listing=listing.text if listing is not None else None)
        schemas = await asyncio.to_thread(env.tool_schemas)
        known = {str(s["function"]["name"]) for s in schemas}
        chat: ToolMessages = [{"role": "system", "content": system}, *opening]
        user_turns, steps = 0, 0
        while said is not None:
            user_turns += 1
            chat.append({"role": "user", "content": said})
            messages.append(Message.text("user", said))
            transcript.append(Turn("user", said))
            while True:  # agent turns until it answers in text
                if steps >= max_steps:
                    return "step limit"
                turn = await self.llm.tools("rollout", chat, schemas, sampling_of(case))
                steps += 1
                chat.append(_assistant_message(turn.text, turn.tool_calls))
                parts: list[Part] = [TextPart(text=turn.text)] if turn.text else []
                for call in turn.tool_calls:
                    part = await asyncio.to_thread(run_tool_call, env, known, call)
                    parts.append(part)
                    chat.append({"role": "tool", "tool_call_id": call.id,
                                 "content": part.tool_output or ""})
                messages.append(Message(role="assistant", parts=parts))
                if not turn.tool_calls:
                    transcript.append(Turn("agent", turn.text))
                    break
            if user_turns >= max_user_turns:
                return "user turn limit"
            said = await user.next_message(transcript)
        return "user done"


class RoutingRolloutExecutor:
    """Cases bound to a tool environment go to ``tools``, the others to ``plain`` (or
    to ``tools`` as well, with ``every_case``: the agent's tools come from an MCP
    server); rollouts come back in the order of the cases."""

    def __init__(self, plain: RolloutExecutor, tools: RolloutExecutor, *,
                 every_case: bool = False) -> None:
        self.plain = plain
        self.tools = tools
        self.every_case = every_case

    async def execute(self, cases: Sequence[Case], policy_set: Snapshot,
                      context: ExecutionContext) -> list[Rollout]:
        bound = [self.every_case or binding(case) is not None for case in cases]
        plain_cases = [c for c, b in zip(cases, bound, strict=True) if not b]
        tool_cases = [c for c, b in zip(cases, bound, strict=True) if b]
        plain, tools = await asyncio.gather(
            self.plain.execute(plain_cases, policy_set, context) if plain_cases else _none(),
            self.tools.execute(tool_cases, policy_set, context) if tool_cases else _none())
        plain_iter, tools_iter = iter(plain), iter(tools)
        return [next(tools_iter) if b else next(plain_iter) for b in bound]


async def _none() -> list[Rollout]:
    return []
