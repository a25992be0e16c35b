"""A batch run's budget (``--max-calls`` / ``--max-cost``, else ``[llm] max_calls`` /
``max_cost``) and its estimate, printed before the run starts.

The calls are counted from the run's cases, phase by phase, as the default chain makes
them: each rollout made here is one ``rollout`` call plus one ``judge`` call per
``llm_judge`` criterion (a tool-calling rollout takes one call per turn: more); each
trained rollout ``[train] calls_per_rollout`` more (1, or 2 for the embedded model, as
:func:`~expgit.runs.wiring.build_pipeline` wires it); each batch one ``merge`` per
chunk of at most ``[train] gradients_per_chunk`` gradients (one gradient per trained
rollout, by estimate); an eval phase one rollout per case (and trial). A training run's
candidate eval is counted once per batch (a batch makes at most one proposal). Rollouts
an environment service runs (``--env-url``) cost nothing here.

In groups (``[train] group_size`` = K > 1) each training case runs K times and its group
is trained with one ``group_reflect`` call and gives one gradient, by estimate. A group
whose runs all got the same evaluation makes no call, which the estimate cannot know
beforehand: it counts every group's call, so it is an upper bound there (and says so).

The tokens are rough: a prompt is its case's input, the experiences the context shows
(the snapshot's, at most ``[context] token_budget``, for the embedded model at most
``embedded_token_budget``) and :data:`PROMPT_OVERHEAD_TOKENS`
of instructions; a training prompt adds the reply it learns from, a merge prompt
:data:`GRADIENT_TOKENS` per gradient; every reply is :data:`COMPLETION_TOKENS` (at most
``[llm] max_tokens``). The cost is those tokens at the model's ``[llm.prices]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from expgit.core.checks import LLMJudgeCheck
from expgit.core.domain import Case
from expgit.errors import UsageError
from expgit.llm.budget import Budget, RunEstimate, money
from expgit.llm.port import CallGuard
from expgit.store.format.experience import estimate_tokens, tokens_of_bytes
from expgit.store.format.settings import LLMSettings
from expgit.store.repository import ExperienceRepository

if TYPE_CHECKING:
    from expgit.llm.factory import LLMRuntime

PROMPT_OVERHEAD_TOKENS = 400  # a prompt's instructions and framing
SHORT_RUN_TOKENS = 100  # a group's run shown in short (its final answer, its evaluation)
COMPLETION_TOKENS = 300  # a reply
GRADIENT_TOKENS = 400  # one gradient as a merge prompt shows it


def make_budget(settings: LLMSettings, max_calls: int | None, max_cost: float | None
                ) -> Budget | None:
    """The run's budget: the flags, else the settings; None if neither bounds it. A
    budget of 0 (or less) is refused (exit 2): it could not make a single call."""
    if max_calls is not None and max_calls < 1:
        raise UsageError(f"--max-calls {max_calls}: a budget must allow at least one call")
    if max_cost is not None and max_cost <= 0:
        raise UsageError(f"--max-cost {max_cost:g}: a budget must be more than 0")
    calls = max_calls if max_calls is not None else settings.max_calls
    cost = max_cost if max_cost is not None else settings.max_cost
    if calls is None and cost is None:
        return None
    return Budget(max_calls=calls, max_cost=cost,
                  calls_from="--max-calls" if max_calls is not None else "[llm] max_calls",
                  cost_from="--max-cost" if max_cost is not None else "[llm] max_cost",
                  currency=settings.currency)


def guard_for(settings: LLMSettings, max_calls: int | None, max_cost: float | None
              ) -> CallGuard:
    """A batch run's guard: it stops the calls at a dead endpoint, at the per-run
    deadline, and once the budget is spent (a long-running service has none)."""
    return CallGuard(max_failures=settings.max_consecutive_failures,
                     deadline_seconds=settings.run_deadline_seconds,
                     budget=make_budget(settings, max_calls, max_cost))


def check_priced(budget: Budget | None, runtime: LLMRuntime) -> None:
    """A cost budget needs the model's price (exit 2 without one)."""
    model = runtime.resolved.model
    if budget is not None and budget.max_cost is not None \
            and runtime.meter.price(model) is None:
        raise UsageError(f"{budget.cost_from} needs the price of the model {model!r}",
                         hint=f'add [llm.prices."{model}"] (prompt_per_million, '
                         "completion_per_million) to expgit.toml, or use --max-calls")


@dataclass
class Tally:
    """Calls and their prompt tokens, added up phase by phase (by estimate)."""

    calls: int = 0
    prompt_tokens: int = 0

    def add(self, calls: int, prompt_tokens: int) -> None:
        self.calls += calls
        self.prompt_tokens += calls * prompt_tokens


class RunPlan:
    """The calls a run will make: each phase added as the run will go through it."""

    def __init__(self, repo: ExperienceRepository, *, rollouts_here: bool = True) -> None:
        self.rollouts_here = rollouts_here  # False: an environment service runs them
        self.per_chunk = repo.settings.train.gradients_per_chunk
        self.train_settings = repo.settings.train
        # every call's prompt shows the experiences: at most this many tokens of them
        self.shown = sum(tokens_of_bytes(len(e.data)) for e in repo.snapshot().entries.values())
        self.context_settings = repo.settings.context
        self.total = Tally()  # every call but the training calls of trained rollouts
        self.trained = Tally()  # one "call" per trained rollout: its training prompt
        # the calls until the first merge: (total, trained) then
        self.first_merge: tuple[Tally, Tally] | None = None
        self.group_size = 1  # the largest a training batch had

    def _prompt(self, case: Case) -> int:
        """A prompt's tokens but its experiences (:meth:`calls` adds those)."""
        return estimate_tokens(json.dumps(case.input)) + PROMPT_OVERHEAD_TOKENS

    def eval(self, cases: Sequence[Case]) -> None:
        """One eval phase (or a batch's rollouts): a rollout per case, its judge calls."""
        if not self.rollouts_here:
            return
        for case in cases:
            judges = sum(1 for c in case.rubric.criteria if isinstance(c.check, LLMJudgeCheck))
            self.total.add(1 + judges, self._prompt(case))

    def evals(self, cases: Sequence[Case], passes: int) -> RunPlan:
        """``expgit eval``: ``passes`` eval phases (one per revision)."""
        for _ in range(passes):
            self.eval(cases)
        return self

    def train(self, cases: Sequence[Case], *, rolled_out: bool = False,
              group_size: int = 1) -> RunPlan:
        """One training batch: its rollouts (unless ``rolled_out``: recorded; each case
        ``group_size`` times), their training calls (one per group) and merges."""
        self.group_size = max(self.group_size, group_size)
        if not rolled_out:
            self.eval([case for case in cases for _ in range(group_size)])
        shown = COMPLETION_TOKENS * min(group_size, 2) + SHORT_RUN_TOKENS * max(
            group_size - 2, 0)  # a group: its best and worst run in full, the others short
        for case in cases:
            self.trained.add(1, self._prompt(case) + shown)
        for start in range(0, len(cases), self.per_chunk):
            chunk = min(self.per_chunk, len(cases) - start)
            self.total.add(1, chunk * GRADIENT_TOKENS + PROMPT_OVERHEAD_TOKENS)
            if self.first_merge is None:
                self.first_merge = (Tally(self.total.calls, self.total.prompt_tokens),
                                    Tally(self.trained.calls, self.trained.prompt_tokens))
        return self

    def calls(self, per_rollout: int, upto: tuple[Tally, Tally] | None = None, *,
              embedded: bool = False) -> Tally:
        """The calls (and prompt tokens, each prompt with the experiences the context of
        the embedded model or an endpoint shows) with ``per_rollout`` training calls per
        trained rollout: of the whole run, or of the part ``upto`` records."""
        total, trained = upto or (self.total, self.trained)
        calls = total.calls + per_rollout * trained.calls
        context = min(self.shown, self.context_settings.budget_for(embedded))
        return Tally(calls, total.prompt_tokens + per_rollout * trained.prompt_tokens
                     + calls * context)


def train_plan(repo: ExperienceRepository, train_set: list[Case], eval_set: list[Case] | None,
               *, epochs: int, batch_size: int | None, measure: bool, rollouts_here: bool,
               group_size: int = 1, apply: bool = False) -> RunPlan:
    """``expgit train``: baseline eval, each epoch's batches (each measured), final eval;
    the final eval reuses the measurement of ``main``'s tree (no call) unless something
    else moves ``main`` meanwhile: the baseline's in propose mode, the applied proposal's
    candidate eval in apply mode with the candidate eval."""
    plan = RunPlan(repo, rollouts_here=rollouts_here)
    size = batch_size or len(train_set) or 1
    if eval_set:
        plan.eval(eval_set)
    for _ in range(epochs):
        for start in range(0, len(train_set), size):
            plan.train(train_set[start:start + size], group_size=group_size)
            if eval_set and measure:
                plan.eval(eval_set)
    if eval_set and apply and not measure:
        plan.eval(eval_set)
    return plan


def estimate(plan: RunPlan, runtime: LLMRuntime, budget: Budget | None) -> RunEstimate:
    """The plan's calls, tokens and cost; a warning when the budget cannot buy one merge."""
    settings = runtime.settings
    reply = min(COMPLETION_TOKENS, settings.max_tokens)
    price = runtime.meter.price(runtime.resolved.model)

    def cost(tally: Tally) -> float | None:
        return None if price is None else price.cost(tally.prompt_tokens, tally.calls * reply)

    embedded = runtime.is_local
    per_rollout = plan.train_settings.calls_for(embedded=embedded, group_size=plan.group_size)
    whole = plan.calls(per_rollout, embedded=embedded)
    first = (plan.calls(per_rollout, plan.first_merge, embedded=embedded)
             if plan.first_merge else None)
    result = RunEstimate(calls=whole.calls, prompt_tokens=whole.prompt_tokens,
                         completion_tokens=whole.calls * reply, cost=cost(whole),
                         currency=settings.currency if price is not None else None,
                         first_merge_calls=first.calls if first is not None else None)
    if plan.group_size > 1:
        result.notes.append(
            f"groups of {plan.group_size}: an upper bound, counting one group_reflect call "
            "per group; a group whose runs all got the same evaluation makes none")
    if budget is None or first is None:
        return result
    before = "(its rollouts and their training first)"
    if budget.max_calls is not None and budget.max_calls < first.calls:
        result.warnings.append(
            f"{budget.calls_from} {budget.max_calls} cannot buy one merge: the first "
            f"comes after about {first.calls} calls {before}")
    first_cost = cost(first)
    if budget.max_cost is not None and first_cost is not None \
            and budget.max_cost < first_cost:
        result.warnings.append(
            f"{budget.cost_from} {budget.max_cost:g} cannot buy one merge: the first "
            f"costs about {money(first_cost, result.currency)} {before}")
    return result


Announce = Callable[[RunEstimate], None]


def announce(plan: RunPlan, runtime: LLMRuntime, told: Announce | None) -> RunEstimate:
    """The run's estimate, told to ``told`` (the CLI prints it on stderr) before it runs."""
    guard = runtime.meter.guard
    result = estimate(plan, runtime, guard.budget if guard is not None else None)
    if told is not None:
        told(result)
    return result
