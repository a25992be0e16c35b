"""Recorded rollouts and outcome records, read into one view per run.

A run's id is the rollout's content id (:func:`~expgit.train.records.trajectory_store.rollout_id`,
the id outcome records use for rollouts and trajectories); ``metadata`` keys
``rollout_id``, ``execution_id`` and ``response_id`` are accepted as aliases, so outcomes
recorded against an environment's or a session's id still find their run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from expgit.core.domain import Rollout, ToolPart
from expgit.outcomes.records import OutcomeRecord, polarity
from expgit.outcomes.stats import UsageRow, outcome_run_id, parse_time
from expgit.retrieval.usage import KEY as USAGE_KEY
from expgit.retrieval.usage import read_usage
from expgit.train.components.evaluator import user_turn
from expgit.train.records.trajectory_store import rollout_id

ALIAS_KEYS = ("rollout_id", "execution_id", "response_id")


@dataclass
class Run:
    """One recorded rollout as the report sees it."""

    id: str
    rollout: Rollout
    signature: str
    query: str
    answer: str
    tools: tuple[str, ...]
    used: tuple[str, ...] | None  # None: the rollout did not record its experiences
    passed: bool | None
    score: float | None
    outcomes: list[OutcomeRecord] = field(default_factory=list)

    @property
    def judged(self) -> bool:
        """Evaluated, or judged by at least one outcome record."""
        return self.passed is not None or bool(self.outcomes)

    @property
    def bad(self) -> bool:
        """Failed its evaluation or drew a negative outcome."""
        return self.passed is False or any(polarity(o.verdict) < 0 for o in self.outcomes)

    @property
    def well_rated(self) -> bool:
        """Passed (or, unevaluated, drew a positive outcome) and drew no negative one."""
        positive = any(polarity(o.verdict) > 0 for o in self.outcomes)
        return not self.bad and (self.passed is True or (self.passed is None and positive))

    @property
    def rating(self) -> float:
        """The score the seed pack ranks by: the evaluation's, else the best outcome's."""
        if self.score is not None:
            return self.score
        return max((o.score for o in self.outcomes if polarity(o.verdict) > 0), default=0.0)


def _run(rollout: Rollout) -> Run:
    answer = next((m.plain_text for m in reversed(rollout.messages)
                   if m.role == "assistant" and m.plain_text.strip()), "")
    tools = tuple(p.tool_name for m in rollout.messages for p in m.parts
                  if isinstance(p, ToolPart))
    used = (tuple(u.name for u in read_usage(rollout.metadata))
            if USAGE_KEY in rollout.metadata else None)
    evaluation = rollout.evaluation
    return Run(id=rollout_id(rollout), rollout=rollout, signature=rollout.case.task_signature,
               query=user_turn(rollout.case), answer=answer, tools=tools, used=used,
               passed=evaluation.passed if evaluation else None,
               score=evaluation.score if evaluation else None)


@dataclass
class RunSet:
    runs: list[Run]
    outcomes: list[OutcomeRecord]
    aliases: dict[str, str]  # other id -> run id
    unmatched: list[OutcomeRecord]  # on a rollout/trajectory not in the file

    def rows(self) -> list[UsageRow]:
        """The runs as statistics rows (only those that recorded their experiences)."""
        return [UsageRow(r.id, r.used, r.passed, r.score,
                         parse_time(r.rollout.metadata.get("ended_at")
                                    or r.rollout.metadata.get("created_at")))
                for r in self.runs if r.used]


def build_runs(rollouts: Sequence[Rollout], outcomes: Sequence[OutcomeRecord]) -> RunSet:
    """One Run per rollout (a rollout recorded twice counts once), sorted by id, each with
    the outcome records about it."""
    by_id: dict[str, Run] = {}
    for rollout in rollouts:
        run = _run(rollout)
        by_id.setdefault(run.id, run)
    aliases: dict[str, str] = {}
    for run in by_id.values():
        for key in ALIAS_KEYS:
            value = run.rollout.metadata.get(key)
            if isinstance(value, str) and value.strip() and value.strip() not in by_id:
                aliases.setdefault(value.strip().lower(), run.id)
    unmatched: list[OutcomeRecord] = []
    for record in outcomes:
        target = outcome_run_id(record)
        if target is None:
            continue
        match = by_id.get(aliases.get(target, target))
        if match is None:
            unmatched.append(record)
        else:
            match.outcomes.append(record)
    return RunSet(sorted(by_id.values(), key=lambda r: r.id), list(outcomes), aliases,
                  unmatched)
