"""The measured effect of a proposal: its snapshot (candidate) against its base (baseline)
on the same held-out cases, and the regression gate.

Figures (each case run ``trials`` times; c of its n trials passed):

* ``accuracy``: passed rollouts / rollouts, with a 95% Wilson score interval (``ci``);
* ``pass_k``: as tau2-bench, the mean over cases of C(c, k) / C(n, k), for k = 1 and
  k = trials (the chance that k runs of the case all pass);
* ``delta``: candidate accuracy - baseline accuracy (0..1), its 95% interval from the
  normal approximation of the paired per-case differences (deterministic);
* a case passes when at least half its trials passed; ``flipped`` lists the cases whose
  verdict changed, with the criteria that failed on the failing side.

The gate (``[train] gate``, ``--gate``) passes when ``delta >= min_delta`` and at most
``max_regressions`` cases went pass -> fail. A rollout that failed (an error, not a wrong
answer) on either side leaves it undecided (``passed`` null): never passed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel, Field, model_serializer

from expgit.core.domain import Rollout
from expgit.train.measurement.predictions import PredictionCheck

Z95 = 1.959963984540054


class EvalSummary(BaseModel):
    cases: int = 0
    trials: int = 1
    passed: int = 0
    accuracy: float = 0.0
    mean_score: float = 0.0
    pass_k: dict[str, float] = Field(default_factory=dict)
    ci: list[float] = Field(default_factory=lambda: [0.0, 0.0])


class Flip(BaseModel):
    case: str
    # "from" is a keyword: the field is from_, read and written as "from" (a saved
    # report validates again: `expgit report-html`)
    from_: str = Field(validation_alias=AliasChoices("from_", "from"))
    to: str
    criteria: list[str] = Field(default_factory=list)

    @model_serializer
    def _dump(self) -> dict[str, Any]:
        return {"case": self.case, "from": self.from_, "to": self.to,
                "criteria": list(self.criteria)}


class GateResult(BaseModel):
    checked: bool = False
    passed: bool | None = None
    reason: str = "no gate set: --gate, [train] gate"


class SkillLift(BaseModel):
    """A skill on its own evals (``evals/evals.json``, :mod:`expgit.train.measurement.skill_evals`):
    ``baseline`` (``without_skill``, or ``old_skill`` when a proposal changes it) against
    ``candidate`` (``with_skill``: the skill on main, or the proposal's new version)."""

    skill: str
    evals_file: str
    baseline_config: str = "without_skill"
    candidate_config: str = "with_skill"
    baseline: EvalSummary
    candidate: EvalSummary
    delta: float = 0.0
    delta_ci: list[float] = Field(default_factory=lambda: [0.0, 0.0])
    errors: int = 0  # rollouts that failed on either side: then the lift is undecided

    @property
    def worse(self) -> bool:
        """The skill does worse on its own evals than its baseline."""
        return self.delta < -1e-12


class CandidateReport(BaseModel):
    proposal: str
    # the agent model both sides were measured with (None: not known, a report from
    # before it was recorded)
    agent_model: str | None = None
    baseline: EvalSummary
    candidate: EvalSummary
    delta: float = 0.0
    delta_ci: list[float] = Field(default_factory=lambda: [0.0, 0.0])
    flipped: list[Flip] = Field(default_factory=list)
    gate: GateResult = Field(default_factory=GateResult)
    # each edit's prediction against the observed flips (expgit.train.measurement.predictions)
    predictions: list[PredictionCheck] = Field(default_factory=list)
    unpredicted_flips: list[str] = Field(default_factory=list)
    # each changed skill with evals, old against new on them (docs/skill-evals.md)
    skill_lifts: list[SkillLift] = Field(default_factory=list)


@dataclass(frozen=True)
class Gate:
    """``min_delta``: the least accuracy delta (0..1, may be negative);
    ``max_regressions``: the cases allowed to go pass -> fail."""

    min_delta: float = 0.0
    max_regressions: int = 0


def wilson(passed: int, total: int, z: float = Z95) -> list[float]:
    if total == 0:
        return [0.0, 1.0]
    p = passed / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _by_case(rollouts: Sequence[Rollout]) -> dict[str, list[Rollout]]:
    cases: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        cases.setdefault(rollout.case.name, []).append(rollout)
    return cases


def _passed(rollout: Rollout) -> bool:
    return bool(rollout.evaluation and rollout.evaluation.passed)


def _rate(trials: Sequence[Rollout]) -> float:
    return sum(map(_passed, trials)) / len(trials)


def summarize(rollouts: Sequence[Rollout], trials: int) -> EvalSummary:
    cases = _by_case(rollouts)
    total = len(rollouts)
    passed = sum(map(_passed, rollouts))
    scores = [r.evaluation.score if r.evaluation else 0.0 for r in rollouts]

    def pass_k(k: int) -> float:
        values = [math.comb(sum(map(_passed, t)), k) / math.comb(len(t), k)
                  for t in cases.values() if len(t) >= k]
        return sum(values) / len(values) if values else 0.0

    return EvalSummary(cases=len(cases), trials=trials, passed=passed,
                       accuracy=passed / total if total else 0.0,
                       mean_score=sum(scores) / total if total else 0.0,
                       pass_k={"1": pass_k(1), str(trials): pass_k(trials)},
                       ci=wilson(passed, total))


def paired_delta_ci(baseline: Sequence[Rollout], candidate: Sequence[Rollout]
                    ) -> list[float]:
    """95% interval of the mean per-case difference of pass rates (normal
    approximation); [-1, 1] when fewer than two cases are shared."""
    base, cand = _by_case(baseline), _by_case(candidate)
    diffs = [_rate(cand[name]) - _rate(base[name]) for name in base if name in cand]
    if len(diffs) < 2:
        return [-1.0, 1.0]
    mean = sum(diffs) / len(diffs)
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    half = Z95 * math.sqrt(var / len(diffs))
    return [max(-1.0, mean - half), min(1.0, mean + half)]


def _failed_criteria(trials: Sequence[Rollout]) -> list[str]:
    names: dict[str, None] = {}
    for rollout in trials:
        for result in rollout.evaluation.criterion_results if rollout.evaluation else []:
            if not result.passed:
                names.setdefault(result.criterion_name)
        if rollout.error:
            names.setdefault(f"error: {rollout.error}")
    return list(names)


def flipped(baseline: Sequence[Rollout], candidate: Sequence[Rollout]) -> list[Flip]:
    base, cand = _by_case(baseline), _by_case(candidate)
    flips = []
    for name in base:
        if name not in cand:
            continue
        was, now = _rate(base[name]) >= 0.5, _rate(cand[name]) >= 0.5
        if was != now:
            failing = cand[name] if was else base[name]
            flips.append(Flip(case=name, from_="pass" if was else "fail",
                              to="pass" if now else "fail",
                              criteria=_failed_criteria(failing)))
    return flips


def check_gate(gate: Gate | None, report: CandidateReport, errors: int) -> GateResult:
    """``errors``: rollouts that failed (on either side); then the gate is undecided."""
    if gate is None:
        return GateResult()
    if errors:
        return GateResult(checked=True, passed=None,
                          reason=f"could not be decided: {errors} eval rollouts failed")
    regressions = sum(1 for f in report.flipped if f.to == "fail")
    problems = []
    if report.delta < gate.min_delta - 1e-12:
        problems.append(f"delta {report.delta * 100:+.2f}pp is below the minimum "
                        f"{gate.min_delta * 100:+.2f}pp")
    if regressions > gate.max_regressions:
        problems.append(f"{regressions} cases went pass -> fail (at most "
                        f"{gate.max_regressions} allowed)")
    if problems:
        return GateResult(checked=True, passed=False, reason="; ".join(problems))
    return GateResult(checked=True, passed=True,
                      reason=f"delta {report.delta * 100:+.2f}pp >= "
                      f"{gate.min_delta * 100:+.2f}pp, {regressions} pass -> fail "
                      f"<= {gate.max_regressions}")


def gate_skill_lifts(gate: Gate | None, report: CandidateReport) -> GateResult:
    """The gate with the changed skills' own evals too: a skill that does worse on them
    than its old version fails it; one whose rollouts failed leaves it undecided."""
    if gate is None or not report.skill_lifts or report.gate.passed is False:
        return report.gate
    worse = [lift for lift in report.skill_lifts if lift.worse and not lift.errors]
    if worse:
        reason = "; ".join(f"skill {lift.skill} does worse on its own evals "
                           f"({lift.evals_file}): {lift.delta * 100:+.2f}pp against "
                           f"{lift.baseline_config}" for lift in worse)
        return GateResult(checked=True, passed=False, reason=reason)
    failed = [lift for lift in report.skill_lifts if lift.errors]
    if failed:
        return GateResult(checked=True, passed=None, reason=(
            f"could not be decided: {sum(f.errors for f in failed)} rollouts of the "
            f"skill evals of {', '.join(f.skill for f in failed)} failed"))
    return report.gate


def compare(proposal: str, baseline: Sequence[Rollout], candidate: Sequence[Rollout],
            trials: int, gate: Gate | None) -> CandidateReport:
    base, cand = summarize(baseline, trials), summarize(candidate, trials)
    report = CandidateReport(proposal=proposal, baseline=base, candidate=cand,
                             delta=cand.accuracy - base.accuracy,
                             delta_ci=paired_delta_ci(baseline, candidate),
                             flipped=flipped(baseline, candidate))
    errors = sum(1 for r in [*baseline, *candidate] if r.error)
    report.gate = check_gate(gate, report, errors)
    return report


def undecided(proposal: str, baseline: Sequence[Rollout], trials: int, gate: Gate | None,
              why: str) -> CandidateReport:
    """The candidate eval itself failed: no figures, and the gate is not passed."""
    report = CandidateReport(proposal=proposal, baseline=summarize(baseline, trials),
                             candidate=EvalSummary(trials=trials), delta_ci=[-1.0, 1.0])
    report.gate = GateResult(checked=gate is not None, passed=None,
                             reason=f"could not be decided: the candidate eval failed: {why}")
    return report


def gate_failures(reports: Sequence[CandidateReport]) -> list[CandidateReport]:
    """The candidates a checked gate did not pass (failed or undecided)."""
    return [r for r in reports if r.gate.checked and r.gate.passed is not True]


def gate_refusal(report: CandidateReport) -> str:
    """Why a checked gate did not pass ``report``'s proposal, in one line: it lowered the
    eval, failed the gate without lowering it (a delta under the minimum, regressions),
    or could not be decided."""
    what = ("" if report.gate.passed is None
            else " lowered the eval" if report.delta < 0 else " failed the gate")
    return f"gate: proposal {report.proposal}{what}: {report.gate.reason}"


def summary_line(report: CandidateReport) -> str:
    b, c = report.baseline, report.candidate
    low, high = report.delta_ci
    flips = ", ".join(f"{f.case} {f.from_}->{f.to}" for f in report.flipped) or "none"
    verdict = ("not checked" if not report.gate.checked else "passed" if report.gate.passed
               else "FAILED" if report.gate.passed is False else "UNDECIDED")
    return (f"candidate {report.proposal}: baseline {b.passed}/{b.cases * b.trials} "
            f"({b.accuracy * 100:.2f}%) -> candidate {c.passed}/{c.cases * c.trials} "
            f"({c.accuracy * 100:.2f}%), delta {report.delta * 100:+.2f}pp "
            f"[{low * 100:+.2f}, {high * 100:+.2f}]; flipped: {flips}; gate: {verdict}"
            + (f" ({report.gate.reason})" if report.gate.checked else ""))


def lift_line(lift: SkillLift) -> str:
    """A skill's lift on its own evals, in one line."""
    low, high = lift.delta_ci
    b, c = lift.baseline, lift.candidate
    return (f"skill {lift.skill}: {lift.candidate_config} {c.passed}/{c.cases * c.trials} "
            f"({c.accuracy * 100:.2f}%) vs {lift.baseline_config} {b.passed}/"
            f"{b.cases * b.trials} ({b.accuracy * 100:.2f}%), lift "
            f"{lift.delta * 100:+.2f}pp [{low * 100:+.2f}, {high * 100:+.2f}]"
            + (f"; {lift.errors} rollouts failed: undecided" if lift.errors else ""))
