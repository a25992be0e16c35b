"""A strict scripted chat model for tests and benchmarks.

Each expected call is a :class:`Step`: the stage it is for and the reply (a string, or a
function of the messages). A call takes the first unused step of its stage, so concurrent
stages need no fixed interleaving; a step for a tool-calling turn
(:meth:`ScriptedChatModel.complete_tools`) may reply with a :class:`ToolTurn` (text and
tool calls), or a function of the messages returning one; a call for which no step is
left fails loudly, and
:meth:`ScriptedChatModel.assert_done` fails if scripted steps were never used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from expgit.llm.port import ChatMessages, Completion, ToolMessages, ToolTurn

Reply = str | Callable[[ChatMessages], str]
ToolReply = str | ToolTurn | Callable[[ToolMessages], "str | ToolTurn"]


class ScriptError(AssertionError):
    """The code under test made a call the script did not expect."""


@dataclass
class Step:
    stage: str
    reply: Reply | ToolReply
    finish_reason: str = "stop"


@dataclass
class ScriptedChatModel:
    steps: list[Step]
    model: str = "scripted"
    delay_seconds: float = 0.0
    calls: list[tuple[str, Any, dict[str, Any] | None]] = field(default_factory=list)
    seeds: list[int | None] = field(default_factory=list)  # each call's own seed, or None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _used: set[int] = field(default_factory=set)

    async def _take(self, stage: str, messages: Any, extra: dict[str, Any] | None,
                    seed: int | None) -> Step:
        """The next unused step of ``stage``, the call recorded, after ``delay_seconds``."""
        with self._lock:
            self.calls.append((stage, messages, extra))
            index = next((i for i, s in enumerate(self.steps)
                          if s.stage == stage and i not in self._used), None)
            if index is None:
                raise ScriptError(f"unexpected LLM call #{len(self.calls)} for stage "
                                  f"{stage!r}: no scripted step of that stage is left")
            self._used.add(index)
            self.seeds.append(seed)
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        return self.steps[index]

    async def complete_tools(self, messages: ToolMessages, tools: list[dict[str, Any]], *,
                             stage: str, max_tokens: int, temperature: float,
                             seed: int | None = None) -> ToolTurn:
        """The next step of ``stage``: its ToolTurn, or its text as a turn without calls;
        ``calls`` records ``{"tools": tools}`` as the third item."""
        step = await self._take(stage, list(messages), {"tools": tools}, seed)
        reply = step.reply(messages) if callable(step.reply) else step.reply
        turn = reply if isinstance(reply, ToolTurn) else ToolTurn(text=str(reply))
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
        return turn.model_copy(update={
            "finish_reason": turn.finish_reason or step.finish_reason, "model": self.model,
            "prompt_tokens": prompt_tokens, "completion_tokens": len(turn.text) // 4 + 1})

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float, seed: int | None = None) -> Completion:
        step = await self._take(stage, messages, response_format, seed)
        text = step.reply(messages) if callable(step.reply) else step.reply
        if not isinstance(text, str):
            raise ScriptError(f"stage {stage!r}: a tool turn was scripted for a text call")
        prompt_tokens = sum(len(m["content"]) for m in messages) // 4
        return Completion(text=text, finish_reason=step.finish_reason, model=self.model,
                          prompt_tokens=prompt_tokens, completion_tokens=len(text) // 4)

    def assert_done(self) -> None:
        if len(self._used) != len(self.steps):
            unused = [s.stage for i, s in enumerate(self.steps) if i not in self._used]
            raise ScriptError(f"{len(unused)} scripted LLM calls were never made: {unused}")
