"""The candidate eval's check of each edit's prediction (:mod:`expgit.store.derived.predictions`):
the held-out cases it expected to turn from fail to pass against those that did.

Per gradient that predicted something, over the held-out cases its prediction covers (by
case name or task signature):

* ``hit``: one of them went fail -> pass;
* ``miss``: none did, while one was failing at baseline or one went pass -> fail;
* ``unchecked``: no held-out case is covered, or every covered one already passed and
  still passes (nothing to turn).

A flip of a held-out case that no gradient of the proposal predicted is an
``unpredicted`` flip. A case passes when at least half its trials passed, as for
:func:`expgit.train.measurement.candidate.flipped`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from expgit.core.domain import Rollout
from expgit.store.derived.predictions import GradientPrediction, Verdict
from expgit.store.refnames import ID_LEN


class PredictionCheck(BaseModel):
    """One gradient's prediction against the observed flips."""

    gradient: str  # its 12-hex id
    gradient_commit: str
    experience: str
    model: str | None = None
    cases: list[str] = Field(default_factory=list)
    tasks: list[str] = Field(default_factory=list)
    verdict: Verdict
    observed: list[str] = Field(default_factory=list)  # covered cases, "name from->to"
    reason: str


def _verdicts(rollouts: Sequence[Rollout]) -> dict[str, tuple[str, bool]]:
    """``{case: (task signature, passed)}``: passed when at least half its trials did."""
    runs: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        runs.setdefault(rollout.case.name, []).append(rollout)
    return {name: (trials[0].case.task_signature,
                   sum(bool(r.evaluation and r.evaluation.passed) for r in trials)
                   >= len(trials) / 2)
            for name, trials in runs.items()}


def _word(passed: bool) -> str:
    return "pass" if passed else "fail"


def check_predictions(gradients: Sequence[GradientPrediction], baseline: Sequence[Rollout],
                      candidate: Sequence[Rollout]) -> tuple[list[PredictionCheck], list[str]]:
    """(the check of each gradient that predicted something, the unpredicted flips as
    ``"case from->to"``)."""
    before, after = _verdicts(baseline), _verdicts(candidate)
    shared = [(name, task, was, after[name][1]) for name, (task, was) in before.items()
              if name in after]
    checks: list[PredictionCheck] = []
    for g in gradients:
        if not g.prediction:
            continue
        covered = [(n, was, now) for n, task, was, now in shared
                   if g.prediction.covers(n, task)]
        turned = [n for n, was, now in covered if not was and now]
        failing = [n for n, was, now in covered if not was and not now]
        regressed = [n for n, was, now in covered if was and not now]
        verdict: Verdict
        if turned:
            verdict, reason = "hit", f"{', '.join(turned)} went fail -> pass"
        elif failing or regressed:
            verdict = "miss"
            reason = "; ".join(
                ([f"{', '.join(failing)} still fail"] if failing else [])
                + ([f"{', '.join(regressed)} went pass -> fail"] if regressed else []))
        elif covered:
            verdict, reason = "unchecked", "its held-out cases passed already"
        else:
            verdict, reason = "unchecked", "no held-out case of its cases or tasks"
        checks.append(PredictionCheck(
            gradient=g.commit[:ID_LEN], gradient_commit=g.commit, experience=g.target,
            model=g.model, cases=list(g.prediction.cases), tasks=list(g.prediction.tasks),
            verdict=verdict, observed=[f"{n} {_word(was)}->{_word(now)}"
                                       for n, was, now in covered], reason=reason))
    predictions = [g.prediction for g in gradients if g.prediction]
    unpredicted = [f"{n} {_word(was)}->{_word(now)}" for n, task, was, now in shared
                   if was != now and not any(p.covers(n, task) for p in predictions)]
    return checks, unpredicted
