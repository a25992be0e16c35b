"""A strict scripted chat model for tests and benchmarks.

Each expected call is a :class:`Step`: the stage it is for and the reply (a string, or a
function of the messages). A call takes the first unused step of its stage, so concurrent
stages need no fixed interleaving; a call for which no step is left fails loudly, and
:meth:`ScriptedChatModel.assert_done` fails if scripted steps were never used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from expgit.llm.port import ChatMessages, Completion

Reply = str | Callable[[ChatMessages], str]


class ScriptError(AssertionError):
    """The code under test made a call the script did not expect."""


@dataclass
class Step:
    stage: str
    reply: Reply
    finish_reason: str = "stop"


@dataclass
class ScriptedChatModel:
    steps: list[Step]
    model: str = "scripted"
    delay_seconds: float = 0.0
    calls: list[tuple[str, ChatMessages, dict[str, Any] | None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _used: set[int] = field(default_factory=set)

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float) -> Completion:
        with self._lock:
            self.calls.append((stage, messages, response_format))
            index = next((i for i, s in enumerate(self.steps)
                          if s.stage == stage and i not in self._used), None)
            if index is None:
                raise ScriptError(f"unexpected LLM call #{len(self.calls)} for stage "
                                  f"{stage!r}: no scripted step of that stage is left")
            self._used.add(index)
            step = self.steps[index]
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        text = step.reply(messages) if callable(step.reply) else step.reply
        prompt_tokens = sum(len(m["content"]) for m in messages) // 4
        return Completion(text=text, finish_reason=step.finish_reason, model=self.model,
                          prompt_tokens=prompt_tokens, completion_tokens=len(text) // 4)

    def assert_done(self) -> None:
        if len(self._used) != len(self.steps):
            unused = [s.stage for i, s in enumerate(self.steps) if i not in self._used]
            raise ScriptError(f"{len(unused)} scripted LLM calls were never made: {unused}")
