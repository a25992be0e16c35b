"""``expgit eval --skill NAME``: a skill's lift on its own evals (``evals/evals.json``).

The cases run ``runs`` times each against ``main`` (``with_skill``) and against ``main``
with that one skill left out, a policy made in memory (``without_skill``; nothing is
written to the repository). The lift is the pass-rate delta with eval --compare's paired
95% interval; ``benchmark.json`` (skill-creator's shape) goes to ``out``. The evals are
read, and a malformed file refused (exit 5), before any model starts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from expgit.core.domain import Case
from expgit.errors import InvalidInputError
from expgit.runs import budget as run_budget
from expgit.runs import provenance as run_provenance
from expgit.runs.build import RunOptions, _listen, _observer, _open_planned, _report, _tools
from expgit.runs.wiring import build_pipeline
from expgit.store.repository import ExperienceRepository
from expgit.store.skill_evals_file import SkillEvals, read_skill_evals, without_skill
from expgit.train.cases import ListCaseLoader
from expgit.train.context import PipelineContext
from expgit.train.measurement.skill_evals import WITH, WITHOUT, benchmark, eval_cases, measure_lift
from expgit.train.reports.run_report import RunReport

if TYPE_CHECKING:
    from expgit.llm.factory import LLMRuntime

BENCHMARK_FILE = "benchmark.json"


def load_skill_cases(repo: ExperienceRepository, skill: str) -> tuple[SkillEvals, list[Case]]:
    evals = read_skill_evals(repo, skill, repo.main_commit())
    return evals, eval_cases(evals)


def write_benchmark(data: dict[str, object], out: Path) -> Path:
    path = out / BENCHMARK_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot write the benchmark: {exc.strerror}"
                                ) from None
    return path


async def run_skill_eval(repo: ExperienceRepository, skill: str, options: RunOptions,
                         out: Path, *, runtime: LLMRuntime | None = None) -> RunReport:
    """Run ``skill``'s evals with and without it, ``options.trials`` times each; write
    ``out/benchmark.json``; the report carries the lift (``skill_lift``). ``runtime``: a
    model opened by the caller (benchmarks/bench_skill_lift.py), else the settings'."""
    main = repo.main_commit()
    evals, cases = load_skill_cases(repo, skill)  # refused (exit 5) before any model
    with_policy = repo.snapshot(main)
    without_policy = without_skill(repo, with_policy, skill)
    runs = options.trials
    eval_set = [case for case in cases for _ in range(runs)]
    tools = _tools(repo, options, eval_set)
    loader = ListCaseLoader(eval_set, len(eval_set))
    observer = _observer(options, {WITH: len(eval_set), WITHOUT: len(eval_set)})
    started = time.monotonic()
    estimate = None
    if runtime is None:
        runtime, estimate = _open_planned(repo, options,
                                          run_budget.RunPlan(repo).evals(eval_set, 2))
    async with runtime:
        _listen(runtime, observer)
        pipeline = build_pipeline(repo, runtime, concurrency=options.concurrency,
                                  observer=observer, tools=tools)
        sides = [await pipeline.eval(loader, PipelineContext(epoch=0), at=policy, phase=phase)
                 for phase, policy in ((WITH, with_policy), (WITHOUT, without_policy))]
        report = _report("eval", repo, runtime, options, [s.metrics for s in sides],
                         started, pipeline, run_provenance.of_runtime(runtime), estimate)
    report.main_before = report.main_after = main
    lift = measure_lift(skill, evals.path, sides[1].rollouts, sides[0].rollouts, runs)
    report.skill_lift = lift
    data = benchmark(lift, repo.layout.unit_of(skill), runtime.resolved.model,
                     [(WITH, sides[0].rollouts, sides[0].metrics.seconds),
                      (WITHOUT, sides[1].rollouts, sides[1].metrics.seconds)], runs)
    report.benchmark = str(write_benchmark(data, out))
    return report
