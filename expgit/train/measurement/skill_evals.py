"""A skill's evals (``evals/evals.json``, :mod:`expgit.store.skill_evals_file`) as expgit
cases, the lift of a skill on them, and ``benchmark.json`` in skill-creator's shape.

Each eval becomes a :class:`Case` named ``<skill>/<id>``: the ``prompt`` is the user's
message, followed by each of its ``files`` (path and text). Each assertion becomes one
rubric criterion (docs/skill-evals.md has the table):

* ``contains "X"`` / ``mentions "X"`` / ``includes "X"``: a ``contains`` check;
* ``does not contain "X"`` / ``does not mention "X"``: a ``not_contains`` check;
* ``equals "X"``: an ``equals`` check;
* ``matches /RE/`` (``/RE/i``: ignoring case): a ``regex`` check;
* an object ``{"type": ..., ...}``: that rubric check as written (``cases.yaml``'s form);
* any other sentence: an ``llm_judge`` criterion, the judge told the sentence and the
  case's ``expected_output``.

A case without assertions gets one ``llm_judge`` criterion: its ``expected_output``.
Typed forms are matched at the start of the assertion, case-insensitively, and need the
quotes (or slashes): ``Contains a chart`` is a sentence for the judge. An object of an
unknown type, or a pattern that does not compile, is refused (exit 5, file and case).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import TypeAdapter, ValidationError

from expgit.core.checks import CriterionCheck
from expgit.core.domain import Case, Rollout, Rubric, RubricCriterion, TextPart
from expgit.errors import InvalidInputError
from expgit.store.format.experience import estimate_tokens
from expgit.store.repository import ExperienceRepository
from expgit.store.skill_evals_file import SkillEval, SkillEvals, has_evals, read_skill_evals
from expgit.store.workflow.changes import tree_changes
from expgit.store.workflow.proposals import Proposal
from expgit.train.measurement.candidate import SkillLift, compare, lift_line

_CHECK = TypeAdapter(CriterionCheck)
_QUOTED = r"\s+(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|“(?P<cq>[^”]*)”)\s*\.?\s*$"
_FORMS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(?:does\s+not|doesn't|must\s+not)\s+(?:contain|mention|include)"
                + _QUOTED, re.I), "not_contains"),
    (re.compile(r"^(?:contains|mentions|includes)" + _QUOTED, re.I), "contains"),
    (re.compile(r"^equals" + _QUOTED, re.I), "equals"),
)
_REGEX = re.compile(r"^matches\s+/(?P<re>.+)/(?P<flags>i?)\s*\.?\s*$", re.I | re.S)
WITH, WITHOUT, OLD = "with_skill", "without_skill", "old_skill"


def case_name(skill: str, eval_id: int | str) -> str:
    return f"{skill}/{eval_id}"


def assertion_check(assertion: str | dict[str, Any], expected: str, where: str
                    ) -> CriterionCheck:
    """The rubric check of one assertion (see the module's mapping)."""
    if isinstance(assertion, dict):
        try:
            return _CHECK.validate_python(assertion)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidInputError(
                f"{where}: an assertion of an unknown form {assertion.get('type')!r}: "
                f"{'.'.join(map(str, first['loc']))}: "
                f"{first['msg'].removeprefix('Value error, ')}",
                hint="a string, or an object with one of the rubric checks' types: "
                "docs/skill-evals.md") from None
    text = assertion.strip()
    for pattern, kind in _FORMS:
        match = pattern.match(text)
        if match:
            value = match.group("dq") or match.group("sq") or match.group("cq") or ""
            if not value:
                raise InvalidInputError(f"{where}: assertion {text!r}: empty quoted text")
            return _CHECK.validate_python({"type": kind, "value": value})
    match = _REGEX.match(text)
    if match:
        try:
            return _CHECK.validate_python({"type": "regex", "pattern": match.group("re"),
                                           "ignore_case": bool(match.group("flags"))})
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise InvalidInputError(f"{where}: assertion {text!r}: {problem}") from None
    return _CHECK.validate_python({"type": "llm_judge", "instructions": (
        f"The answer must satisfy: {text}\nWhat success looks like: {expected}")})


def _user_message(item: SkillEval, files: dict[str, str]) -> str:
    blocks = [item.prompt]
    for name in item.files:
        blocks.append(f"File {name}:\n```\n{files[name]}\n```")
    return "\n\n".join(blocks)


def eval_cases(evals: SkillEvals) -> list[Case]:
    """Every eval of ``evals`` as a case (assertions -> criteria); InvalidInputError
    naming the file and the case for an assertion expgit cannot take."""
    cases = []
    for index, item in enumerate(evals.evals):
        where = f"{evals.path}: case {index} (id {item.id!r})"
        criteria = [RubricCriterion(name=f"assertion-{n}", description=str(a)[:200],
                                    check=assertion_check(a, item.expected_output,
                                                          f"{where}: assertions[{n}]"))
                    for n, a in enumerate(item.assertions, start=1)]
        if not criteria:
            criteria = [RubricCriterion(
                name="expected-output", description=item.expected_output[:200],
                check=_CHECK.validate_python({"type": "llm_judge", "instructions": (
                    f"The answer must achieve what is expected: {item.expected_output}")}))]
        name = case_name(evals.skill, item.id)
        cases.append(Case(name=name, task_signature=evals.skill,
                          input={"user_query": _user_message(item, evals.files)},
                          rubric=Rubric(name=name, criteria=criteria),
                          metadata={"skill": evals.skill, "eval_id": item.id}))
    return cases


# ------------------------------------------------------------------------------ the lift
def measure_lift(skill: str, evals_file: str, baseline: Sequence[Rollout],
                 candidate: Sequence[Rollout], runs: int, *, baseline_config: str = WITHOUT,
                 candidate_config: str = WITH) -> SkillLift:
    """The lift from the paired per-case pass rates (eval --compare's figures)."""
    figures = compare(skill, baseline, candidate, runs, None)
    return SkillLift(skill=skill, baseline_config=baseline_config,
                     candidate_config=candidate_config, evals_file=evals_file,
                     baseline=figures.baseline, candidate=figures.candidate,
                     delta=figures.delta, delta_ci=figures.delta_ci,
                     errors=sum(1 for r in [*baseline, *candidate] if r.error))


# ------------------------------------------------------------------------ benchmark.json
def _stats(values: Sequence[float]) -> dict[str, float]:
    """mean, sample stddev, min, max (skill-creator's aggregate, rounded to 4)."""
    if not values:
        return {"mean": 0.0, "stddev": 0.0, "min": 0.0, "max": 0.0}
    mean = sum(values) / len(values)
    var = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)
           if len(values) > 1 else 0.0)
    return {"mean": round(mean, 4), "stddev": round(math.sqrt(var), 4),
            "min": round(min(values), 4), "max": round(max(values), 4)}


def _tokens(rollout: Rollout) -> int:
    return sum(estimate_tokens(p.text) for m in rollout.messages for p in m.parts
               if isinstance(p, TextPart))


def _runs(config: str, rollouts: Sequence[Rollout], seconds: float) -> list[dict[str, Any]]:
    per_run = seconds / len(rollouts) if rollouts else 0.0
    numbers: dict[str, int] = {}
    runs: list[dict[str, Any]] = []
    for rollout in rollouts:
        results = rollout.evaluation.criterion_results if rollout.evaluation else []
        passed = sum(1 for r in results if r.passed)
        total = len(results) or len(rollout.case.rubric.criteria)
        numbers[rollout.case.name] = numbers.get(rollout.case.name, 0) + 1
        runs.append({
            "eval_id": rollout.case.metadata.get("eval_id", rollout.case.name),
            "eval_name": rollout.case.name,
            "configuration": config,
            "run_number": numbers[rollout.case.name],
            "result": {"pass_rate": round(passed / total, 4) if total else 0.0,
                       "passed": passed, "failed": total - passed, "total": total,
                       "time_seconds": round(per_run, 3), "tokens": _tokens(rollout),
                       "tool_calls": 0, "errors": 1 if rollout.error else 0},
            "expectations": [{"text": next((c.description for c in rollout.case.rubric
                                            .criteria if c.name == r.criterion_name),
                                           r.criterion_name),
                              "passed": r.passed, "evidence": "; ".join(r.feedback)}
                             for r in results],
            "notes": [f"rollout failed: {rollout.error}"] if rollout.error else [],
        })
    return runs


def benchmark(lift: SkillLift, skill_path: str, model: str,
              sides: Sequence[tuple[str, Sequence[Rollout], float]], runs: int
              ) -> dict[str, Any]:
    """benchmark.json as skill-creator's ``aggregate_benchmark.py`` writes it:
    ``metadata``, ``runs`` (one per case and run, ``result`` nested), ``run_summary``
    (per configuration ``pass_rate``, ``time_seconds`` and ``tokens`` as mean, stddev,
    min, max; ``delta`` as signed strings, the first configuration minus the second) and
    ``notes``; plus expgit's ``lift`` (the delta's 95% interval). ``sides``: (the
    configuration, its rollouts, its seconds), the measured one first."""
    all_runs = [run for config, rollouts, seconds in sides
                for run in _runs(config, rollouts, seconds)]
    summary: dict[str, Any] = {}
    for config, _, _ in sides:
        mine = [r["result"] for r in all_runs if r["configuration"] == config]
        summary[config] = {key: _stats([float(r[key]) for r in mine])
                           for key in ("pass_rate", "time_seconds", "tokens")}
    first, second = (summary[c] for c, _, _ in sides[:2])
    summary["delta"] = {
        "pass_rate": f"{first['pass_rate']['mean'] - second['pass_rate']['mean']:+.2f}",
        "time_seconds":
            f"{first['time_seconds']['mean'] - second['time_seconds']['mean']:+.1f}",
        "tokens": f"{first['tokens']['mean'] - second['tokens']['mean']:+.0f}"}
    notes = [lift_line(lift)]
    return {
        "metadata": {"skill_name": lift.skill, "skill_path": skill_path,
                     "executor_model": model, "analyzer_model": model,
                     "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "evals_run": sorted({r["eval_id"] for r in all_runs}, key=str),
                     "runs_per_configuration": runs},
        "runs": all_runs,
        "run_summary": summary,
        "notes": notes,
        "lift": lift.model_dump(mode="json"),
    }


# ------------------------------------------------------------- a proposal's changed skills
def changed_skill_evals(repo: ExperienceRepository, proposal: Proposal
                        ) -> list[tuple[str, SkillEvals]]:
    """The skills ``proposal`` changes that have evals, and their evals (see
    :func:`skill_evals_between`)."""
    return skill_evals_between(repo, proposal.base, proposal.commit,
                               sorted({change.name for change in proposal.changes}))


def skill_evals_between(repo: ExperienceRepository, base: str, commit: str,
                        skills: Sequence[str] | None = None
                        ) -> list[tuple[str, SkillEvals]]:
    """The skills changed from ``base`` to ``commit`` (or ``skills``) that have evals, and
    their evals: those at ``base`` when the skill had them there (a change cannot weaken
    its own test), else those it brings. A malformed evals.json: InvalidInputError (file
    and case)."""
    if not repo.layout.skills:
        return []
    if skills is None:
        skills = sorted({c.name for c in tree_changes(repo.git, base, commit, repo.layout)})
    found = []
    for skill in skills:
        for at in (base, commit):
            if has_evals(repo, at, skill):
                evals = read_skill_evals(repo, skill, at)
                eval_cases(evals)  # an assertion expgit cannot take: refused now
                found.append((skill, evals))
                break
    return found


def check_skill_evals(repo: ExperienceRepository, commit: str) -> int:
    """Read every skill's evals at ``commit`` (a malformed one: InvalidInputError, file and
    case), before a run that may measure them starts a model; how many skills have them."""
    if not repo.layout.skills:
        return 0
    found = 0
    for skill in repo.snapshot(commit).names():
        if has_evals(repo, commit, skill):
            eval_cases(read_skill_evals(repo, skill, commit))
            found += 1
    return found


@dataclass(frozen=True)
class SkillCases:
    """``--cases skill:NAME``: the evals of skill NAME on ``main``, as cases."""

    skill: str

    @classmethod
    def parse(cls, spec: str) -> SkillCases | None:
        """The skill a cases spec names (``skill:NAME``), or None for a file."""
        return cls(spec.removeprefix(SKILL_PREFIX)) if spec.startswith(SKILL_PREFIX) else None

    def load(self, repo: ExperienceRepository) -> list[Case]:
        return eval_cases(read_skill_evals(repo, self.skill, repo.main_commit()))


SKILL_PREFIX = "skill:"


class EvaluateCases(Protocol):
    def __call__(self, commit: str, phase: str, epoch: int,
                 cases: Sequence[Case] | None = None) -> Awaitable[list[Rollout]]: ...


SKILL_EVAL_PHASE = "skill_eval"


async def proposal_skill_lifts(repo: ExperienceRepository, evaluate: EvaluateCases,
                               base: str, commit: str,
                               found: Sequence[tuple[str, SkillEvals]], epoch: int,
                               runs: int) -> list[SkillLift]:
    """Each changed skill's evals, ``runs`` times each, at the proposal's ``base``
    (``old_skill``; ``without_skill`` for a new skill) and at the proposal's ``commit``
    (``with_skill``; ``without_skill`` when it deletes the skill)."""
    lifts = []
    for skill, evals in found:
        cases = [case for case in eval_cases(evals) for _ in range(runs)]
        before = await asyncio.to_thread(repo.snapshot, base)
        after = await asyncio.to_thread(repo.snapshot, commit)
        old = await evaluate(base, SKILL_EVAL_PHASE, epoch, cases)
        new = await evaluate(commit, SKILL_EVAL_PHASE, epoch, cases)
        lifts.append(measure_lift(skill, evals.path, old, new, runs,
                                  baseline_config=OLD if skill in before else WITHOUT,
                                  candidate_config=WITH if skill in after else WITHOUT))
    return lifts
