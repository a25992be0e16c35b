"""Benchmark the calls of a lift measurement: ``expgit eval --skill NAME --runs K``.

Run by hand (this is not a test)::

    python benchmarks/bench_skill_lift.py [--cases 4] [--runs 3] [--judged 1] [--dir PATH]

A skills-layout repository with one skill whose ``evals/evals.json`` holds ``--cases``
cases; ``--judged`` of them carry an assertion in words (an ``llm_judge`` criterion), the
others typed assertions only (``contains``, ``matches``: no call). The real
``run_skill_eval`` runs them ``--runs`` times with the skill and without it, against an
in-process fake model (``bench_train.FakeChat``), and the run's usage meter counts the
calls by stage. Expected: ``2 x K`` rollout calls per case, plus one judge call per
judged case and rollout (``2 x K x judged``); no other stage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_train import FakeChat  # noqa: E402

from expgit.init import init_repository  # noqa: E402
from expgit.llm.factory import LLMRuntime  # noqa: E402
from expgit.llm.port import UsageMeter  # noqa: E402
from expgit.runs.build import RunOptions  # noqa: E402
from expgit.runs.skill_lift import run_skill_eval  # noqa: E402
from expgit.store.repository import ExperienceRepository  # noqa: E402

SKILL = "cancellation-policy"
SKILL_MD = f"""---
name: {SKILL}
description: "Use when: a customer asks whether a reservation can be cancelled"
---
# Cancellations

Free cancellation within 24 hours of booking; insurance covers the rest.
"""


def seed(folder: Path, cases: int, judged: int) -> Path:
    (folder / "skills" / SKILL / "evals").mkdir(parents=True)
    (folder / "expgit.toml").write_text('experiences_root = "skills"\nlayout = "skills"\n')
    (folder / "skills" / SKILL / "SKILL.md").write_text(SKILL_MD)
    evals = [{"id": n, "prompt": f"Can I cancel reservation R{n:03d}?",
              "expected_output": "Eligible within 24 hours.",
              "assertions": ['contains "24 hours"', "matches /eligible/i",
                             *(["The answer cites the insurance rule"] if n < judged else [])]}
             for n in range(cases)]
    (folder / "skills" / SKILL / "evals" / "evals.json").write_text(
        json.dumps({"skill_name": SKILL, "evals": evals}, indent=2))
    return folder


async def measure(where: Path, cases: int, runs: int, judged: int) -> dict[str, object]:
    init_repository(where / "repo", seed=seed(where / "seed", cases, judged))
    repo = ExperienceRepository.open(where / "repo")
    meter = UsageMeter()
    started = time.perf_counter()
    report = await run_skill_eval(repo, SKILL, RunOptions(trials=runs), where / "out",
                                  runtime=LLMRuntime.fixed(FakeChat(), meter=meter))
    seconds = time.perf_counter() - started
    stages = {stage: usage.calls for stage, usage in meter.by_stage().items()}
    expected = {"rollout": 2 * runs * cases, **({"judge": 2 * runs * judged} if judged
                                                 else {})}
    assert stages == expected, (stages, expected)
    assert report.skill_lift is not None
    return {"cases": cases, "runs": runs, "judged_cases": judged, "calls": stages,
            "total_calls": sum(stages.values()),
            "formula": f"2 x {runs} x {cases} rollouts + 2 x {runs} x {judged} judges",
            "seconds": round(seconds, 3), "benchmark": report.benchmark}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--judged", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="keep the repository here")
    args = parser.parse_args()
    where = args.dir or Path(tempfile.mkdtemp(prefix="bench-skill-lift-"))
    try:
        figures = asyncio.run(measure(where, args.cases, args.runs,
                                      min(args.judged, args.cases)))
        print(json.dumps(figures, indent=2))
    finally:
        if args.dir is None:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
