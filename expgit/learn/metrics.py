"""``metrics.json``: accuracy per task signature, outcome coverage, per-experience stats.

Deterministic: the same inputs and snapshot give the same file (no clock, sorted keys).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from expgit.learn.lexical import LexicalIndex
from expgit.learn.runs import Run, RunSet
from expgit.outcomes.stats import roll_up
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.settings import LearnSettings

SCHEMA = "expgit.learn.metrics/1"


@dataclass(frozen=True)
class Coverage:
    """How well the experiences a run used fit its task: the best one's lexical relevance."""

    covered: bool
    relevance: float
    best: str | None


def run_coverage(run: Run, index: LexicalIndex, options: LearnSettings) -> Coverage:
    """A run is covered when an experience it used (any usable one on ``main`` if it did
    not record its experiences) reaches ``relevance_threshold`` for its task."""
    if run.used is not None and not run.used:
        return Coverage(False, 0.0, None)
    relevance, best = index.best(f"{run.signature}\n{run.query}", run.used)
    return Coverage(relevance >= options.relevance_threshold, round(relevance, 4), best)


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def accuracy(runs: Sequence[Run]) -> dict[str, Any]:
    evaluated = [r for r in runs if r.passed is not None]
    passed = sum(1 for r in evaluated if r.passed)
    return {"rollouts": len(runs), "evaluated": len(evaluated), "passed": passed,
            "accuracy": _share(passed, len(evaluated)),
            "mean_score": _mean([r.score for r in runs if r.score is not None])}


def outcome_coverage(data: RunSet) -> dict[str, Any]:
    with_outcome = sum(1 for r in data.runs if r.outcomes)
    return {"records": len(data.outcomes),
            "matched": sum(len(r.outcomes) for r in data.runs),
            "unmatched": len(data.unmatched),
            "by_target_kind": dict(sorted(Counter(o.target_kind for o in data.outcomes)
                                          .items())),
            "by_verdict": dict(sorted(Counter(o.verdict for o in data.outcomes).items())),
            "rollouts_with_outcome": with_outcome,
            "coverage": _share(with_outcome, len(data.runs)) or 0.0}


def compute_metrics(data: RunSet, snapshot: Snapshot, index: LexicalIndex,
                    options: LearnSettings) -> dict[str, Any]:
    """The content of ``metrics.json``."""
    signatures: dict[str, list[Run]] = {}
    for run in data.runs:
        signatures.setdefault(run.signature, []).append(run)
    per_signature = {}
    for signature, runs in sorted(signatures.items()):
        coverages = [run_coverage(r, index, options) for r in runs]
        per_signature[signature] = accuracy(runs) | {
            "covered_rollouts": sum(1 for c in coverages if c.covered),
            "best_relevance": max(c.relevance for c in coverages),
            "experiences_used": sorted({n for r in runs for n in r.used or ()})}
    stats = roll_up(data.rows(), data.outcomes, data.aliases)
    return {
        "schema": SCHEMA,
        "snapshot": {"commit": snapshot.commit, "id": snapshot.id},
        "overall": accuracy(data.runs) | {
            "recorded_usage": sum(1 for r in data.runs if r.used is not None)},
        "task_signatures": per_signature,
        "outcome_coverage": outcome_coverage(data),
        "experiences": {name: s.as_dict() for name, s in stats.items()},
    }
