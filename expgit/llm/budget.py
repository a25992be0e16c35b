"""A run's budget and its estimate: the most LLM calls and cost a batch run may spend
(``--max-calls`` / ``--max-cost``, ``[llm] max_calls`` / ``max_cost``), and what the run
will take by estimate, printed before it starts.

The run's :class:`expgit.llm.port.CallGuard` holds the budget: it counts each request as
it is let through and the cost of each counted reply; once the budget is spent, it lets
no more calls through, and the run keeps and reports what it made (like a dead endpoint).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SPENT = "budget: "  # how the reason a budget stops a run begins


def money(cost: float | None, currency: str | None) -> str:
    """``0.004210 USD``; ``unknown`` when a call had no price (no ``[llm.prices]``)."""
    if cost is None:
        return "unknown"
    return f"{cost:.6f}" + (f" {currency}" if currency else "")


class Budget(BaseModel):
    """At most ``max_calls`` requests and ``max_cost`` (in ``currency``) per run; None:
    unbounded. ``calls_from`` / ``cost_from``: where each bound was set (a flag or a
    setting), named in the reason the run stopped."""

    model_config = ConfigDict(frozen=True)

    max_calls: int | None = None
    max_cost: float | None = None
    calls_from: str = "--max-calls"
    cost_from: str = "--max-cost"
    currency: str = "USD"

    def spent(self, calls: int, cost: float | None) -> str | None:
        """Why no more call may start after ``calls`` calls that cost ``cost``, or None."""
        if self.max_calls is not None and calls >= self.max_calls:
            return (f"{SPENT}{self.max_calls} calls reached "
                    f"({self.calls_from} {self.max_calls})")
        if self.max_cost is not None and cost is not None and cost >= self.max_cost:
            return (f"{SPENT}cost {money(cost, self.currency)} reached "
                    f"({self.cost_from} {self.max_cost:g})")
        return None


class RunEstimate(BaseModel):
    """What a run will take by estimate, before it starts (``estimate`` in the report).

    ``calls``: every request, from the run's case counts (see
    :mod:`expgit.runs.budget`); tokens: from the prompts' sizes, rough; ``cost``: those
    tokens at ``[llm.prices]``, None without a price; ``first_merge_calls``: the calls
    until the first merge can be made (a training run; None otherwise); ``warnings``:
    a budget that cannot buy that merge; ``notes``: how to read the figures."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None = None
    currency: str | None = None
    first_merge_calls: int | None = None
    warnings: list[str] = []
    notes: list[str] = []  # how to read the figures (an upper bound for groups)

    def line(self) -> str:
        """``estimate: 12 LLM calls, ~9000 prompt + ~3600 completion tokens, cost ...``"""
        return (f"estimate: {self.calls} LLM calls, ~{self.prompt_tokens} prompt + "
                f"~{self.completion_tokens} completion tokens, cost "
                f"{money(self.cost, self.currency)}")
