"""The chat-model port and the usage meter.

Production implements :class:`ChatModel` with the ``openai`` client against any
OpenAI-compatible ``base_url``; tests use :class:`expgit.llm.scripted.ScriptedChatModel`.
Every call is counted by stage in a :class:`UsageMeter`, with tokens and cost.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from expgit.errors import ExpgitError
from expgit.llm.budget import Budget
from expgit.store.format.settings import Price as Price  # re-exported: what the meter prices by


class LLMError(ExpgitError):
    """The LLM endpoint failed (after retries), or its output was unusable.

    ``cause``: the kind of failure in a few words, the same for every call that failed
    the same way (``timed out``, ``HTTP 503``, ``reply cut off at 2048 tokens
    (finish_reason=length)``), so a run can count its failures by cause."""

    def __init__(self, message: str, *, hint: str | None = None,
                 cause: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.cause = cause or message

    @property
    def transport(self) -> bool:
        """The endpoint did not answer (as opposed to answering badly)."""
        return not isinstance(self, LLMOutputError)


class LLMOutputError(LLMError):
    """The model answered, but not with what was asked (invalid JSON, truncated)."""


class Completion(BaseModel):
    text: str
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""


@dataclass(frozen=True)
class Sampling:
    """One call's own sampling, instead of the runtime's (``[llm] temperature``, no seed):
    the runs of a training group (``[train] group_size``) each get their own seed, so
    they differ. ``seed`` None: the model's own (the embedded model's fixed one)."""

    temperature: float
    seed: int | None = None


ChatMessages = list[dict[str, str]]
ToolMessages = list[dict[str, Any]]  # OpenAI-style, with tool_calls and role "tool"


class ToolCall(BaseModel):
    """One tool call the model asked for; ``arguments`` is the JSON text it sent."""

    id: str
    name: str
    arguments: str = "{}"


class ToolTurn(Completion):
    """One assistant turn of a tool-calling conversation: its text and tool calls."""

    tool_calls: list[ToolCall] = []


class ChatModel(Protocol):
    """One chat completion per :meth:`complete` call.

    May assume: ``messages`` are OpenAI-style ``{"role", "content"}`` dicts. ``stage``
    names the pipeline stage for accounting and scripted tests. ``response_format`` is
    passed through to the endpoint as given (None: plain text).
    Must: return the assistant text, finish reason and token usage; retry transient
    transport failures (429, 5xx, timeouts) with backoff itself. Must never parse or
    validate the text (the caller does). Raises :class:`LLMError` when the endpoint keeps
    failing or refuses the request. ``seed`` is passed only when a call has its own
    (:class:`Sampling`): a model that takes none may leave the keyword out.
    """

    model: str

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float, seed: int | None = None) -> Completion: ...


@runtime_checkable
class ToolCallingModel(ChatModel, Protocol):
    """A chat model that can also call tools (checked at run time: not every model can).
    Same retries and deadline as :meth:`complete`."""

    async def complete_tools(self, messages: ToolMessages, tools: list[dict[str, Any]], *,
                             stage: str, max_tokens: int, temperature: float,
                             seed: int | None = None) -> ToolTurn: ...


class EmbeddingModel(Protocol):
    """Embeds texts; one endpoint call per :meth:`embed`. Raises LLMError on failure."""

    async def embed(self, texts: list[str], *, stage: str) -> list[list[float]]: ...


class StageUsage(BaseModel):
    """``cost``: None (unknown) once a counted call had no price in ``[llm.prices]``."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = 0.0

    def add(self, other: StageUsage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost = add_cost(self.cost, other.cost)


def add_cost(a: float | None, b: float | None) -> float | None:
    """A sum of costs, unknown if either is."""
    return None if a is None or b is None else a + b


class UsageListener(Protocol):
    """Told of each LLM call as it starts and as it is counted (live progress); must not
    raise, and may be called from any thread."""

    def llm_started(self, stage: str) -> None: ...

    def llm_counted(self, stage: str, total: StageUsage) -> None: ...


NOT_CALLED = "not called: "  # the cause of a call a stopped guard refused, then why


class CallGuard:
    """Stops a run's LLM calls once it cannot go on: after ``max_failures`` calls in a row
    that the endpoint did not answer (a dead or hung endpoint: the rest of the run would
    only run into it), once ``deadline_seconds`` have passed since the guard was made, or
    once its ``budget`` is spent (the calls let through, the cost of those counted). A
    stopped guard fails every further call at once, without a request, with the reason
    as its cause; the run keeps and reports what it has."""

    def __init__(self, *, max_failures: int | None = 3,
                 deadline_seconds: float | None = None,
                 budget: Budget | None = None) -> None:
        self.max_failures = max_failures
        self.budget = budget
        self._calls = 0  # let through
        self._cost: float | None = 0.0  # of the calls counted
        self.deadline = None if deadline_seconds is None else (
            time.monotonic() + deadline_seconds)
        self.deadline_seconds = deadline_seconds
        self.stopped: str | None = None  # why, once stopped
        self._streak = 0
        self._lock = threading.Lock()

    def check(self, stage: str) -> None:
        with self._lock:
            if self.stopped is None and self.deadline is not None \
                    and time.monotonic() >= self.deadline:
                self.stopped = (f"the per-run deadline of {self.deadline_seconds:g}s "
                                "passed")
            if self.stopped is None and self.budget is not None:
                self.stopped = self.budget.spent(self._calls, self._cost)
            stopped = self.stopped
            if stopped is None:
                self._calls += 1
        if stopped is not None:
            raise LLMError(f"{stage}: {NOT_CALLED}{stopped}", cause=f"{NOT_CALLED}{stopped}",
                           hint="the run kept what it made before; see its report")

    def failed(self, error: LLMError) -> None:
        with self._lock:
            if not error.transport or error.cause.startswith(NOT_CALLED):
                return
            self._streak += 1
            if self.max_failures is not None and self._streak >= self.max_failures \
                    and self.stopped is None:
                self.stopped = (f"the endpoint stopped answering ({self._streak} calls in "
                                f"a row failed: {error.cause})")

    def succeeded(self) -> None:
        with self._lock:
            self._streak = 0

    def spent(self, cost: float | None) -> None:
        """A call was counted at ``cost`` (None: no price)."""
        with self._lock:
            self._cost = add_cost(self._cost, cost)


class Failure(BaseModel):
    """Calls of one stage that failed the same way."""

    stage: str
    cause: str
    count: int


class UsageMeter:
    """Thread-safe per-stage counts of calls, tokens and cost; and of failed calls by
    stage and cause. ``guard``: stops the run's calls when it cannot go on."""

    def __init__(self, prices: dict[str, Price] | None = None, *,
                 guard: CallGuard | None = None) -> None:
        self.prices = prices or {}
        self._stages: dict[str, StageUsage] = {}
        self._failures: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.listener: UsageListener | None = None
        self.guard = guard

    def failed(self, stage: str, error: LLMError) -> None:
        """A call of ``stage`` failed (after its retries and repair)."""
        with self._lock:
            key = (stage, error.cause)
            self._failures[key] = self._failures.get(key, 0) + 1
        if self.guard is not None:
            self.guard.failed(error)

    def failures(self) -> list[Failure]:
        """The failed calls by stage and cause, most first."""
        with self._lock:
            items = list(self._failures.items())
        return [Failure(stage=stage, cause=cause, count=count) for (stage, cause), count
                in sorted(items, key=lambda item: (-item[1], item[0]))]

    def started(self, stage: str) -> None:
        """A call of ``stage`` is starting (only the listener hears of it)."""
        if self.listener is not None:
            self.listener.llm_started(stage)

    def price(self, model: str) -> Price | None:
        """The price of ``model``: its own, a dated release's base name's
        (``gpt-4o-mini`` for ``gpt-4o-mini-2024-07-18``, as endpoints report it), or
        ``"*"``; None: unknown."""
        if model in self.prices:
            return self.prices[model]
        bases = [name for name in self.prices if model.startswith(f"{name}-")]
        return self.prices[max(bases, key=len)] if bases else self.prices.get("*")

    def record(self, stage: str, completion: Completion) -> None:
        price = self.price(completion.model)
        cost = None if price is None else price.cost(completion.prompt_tokens,
                                                     completion.completion_tokens)
        with self._lock:
            usage = self._stages.setdefault(stage, StageUsage())
            usage.add(StageUsage(calls=1, prompt_tokens=completion.prompt_tokens,
                                 completion_tokens=completion.completion_tokens, cost=cost))
        if self.guard is not None:
            self.guard.spent(cost)
        if self.listener is not None:
            self.listener.llm_counted(stage, self.total())

    def by_stage(self) -> dict[str, StageUsage]:
        with self._lock:
            return {k: v.model_copy() for k, v in sorted(self._stages.items())}

    def total(self) -> StageUsage:
        total = StageUsage()
        for usage in self.by_stage().values():
            total.add(usage)
        return total
