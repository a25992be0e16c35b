"""``findings.json``: what the recorded runs say needs attention, one finding per issue.

Rules (thresholds in :class:`~expgit.store.format.settings.LearnSettings`):

* ``experience_correlated_with_failures``: an experience in the context of at least
  ``min_uses`` judged runs whose failure rate (failed evaluation or negative outcome) is
  well above the baseline of all judged runs;
* ``uncovered_task_signature``: a task signature none of whose runs is covered (no
  experience used, or none lexically relevant enough: :func:`~expgit.learn.metrics.
  run_coverage`);
* ``near_duplicate_experiences``: two usable experiences on ``main`` that are lexically
  near-identical;
* ``low_outcome_coverage``: too few runs have an outcome record to learn from outcomes.

A finding's id is the first 16 hex digits of the SHA-256 of its type, subject and the
sorted references of all its evidence: the same inputs give the same ids, run after run.
At most ``max_evidence`` examples are kept (``evidence_total`` says how many there were).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from expgit.learn.lexical import LexicalIndex
from expgit.learn.metrics import run_coverage
from expgit.learn.runs import Run, RunSet
from expgit.store.format.settings import LearnSettings

FindingType = Literal["experience_correlated_with_failures", "uncovered_task_signature",
                      "near_duplicate_experiences", "low_outcome_coverage"]
Severity = Literal["high", "medium", "low"]
_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    type: FindingType
    severity: Severity
    subject: str
    summary: str
    metrics: dict[str, Any]
    evidence: list[dict[str, Any]]  # each with a "ref"; at most max_evidence
    evidence_total: int


def finding_id(kind: str, subject: str, refs: Sequence[str]) -> str:
    canonical = json.dumps([kind, subject, sorted(refs)], separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def run_evidence(run: Run) -> dict[str, Any]:
    return {"ref": f"rollout:{run.id}", "rollout_id": run.id, "case": run.rollout.case.name,
            "task_signature": run.signature, "passed": run.passed, "score": run.score,
            "outcomes": [o.verdict for o in run.outcomes]}


def _finding(kind: FindingType, severity: Severity, subject: str, summary: str,
             metrics: dict[str, Any], evidence: list[dict[str, Any]],
             options: LearnSettings) -> Finding:
    ordered = sorted(evidence, key=lambda e: str(e["ref"]))
    return Finding(id=finding_id(kind, subject, [str(e["ref"]) for e in ordered]),
                   type=kind, severity=severity, subject=subject, summary=summary,
                   metrics=metrics, evidence=ordered[:options.max_evidence],
                   evidence_total=len(ordered))


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def failure_correlations(data: RunSet, options: LearnSettings) -> list[Finding]:
    judged = [r for r in data.runs if r.judged]
    baseline = _rate(sum(1 for r in judged if r.bad), len(judged))
    bar = max(options.min_failure_rate, baseline + options.failure_margin)
    found = []
    for name in sorted({n for r in judged for n in r.used or ()}):
        runs = [r for r in judged if name in (r.used or ())]
        bad = [r for r in runs if r.bad]
        rate = _rate(len(bad), len(runs))
        if len(runs) < options.min_uses or rate < bar:
            continue
        found.append(_finding(
            "experience_correlated_with_failures", "high" if rate >= 0.8 else "medium", name,
            f"{name} was in the context of {len(runs)} judged runs and {len(bad)} of them "
            f"failed ({rate:.0%}, against {baseline:.0%} over all runs)",
            {"uses": len(runs), "failures": len(bad), "failure_rate": rate,
             "baseline_failure_rate": baseline}, [run_evidence(r) for r in bad], options))
    return found


def uncovered_signatures(data: RunSet, index: LexicalIndex, options: LearnSettings
                         ) -> list[Finding]:
    groups: dict[str, list[Run]] = {}
    for run in data.runs:
        groups.setdefault(run.signature, []).append(run)
    found = []
    for signature, runs in sorted(groups.items()):
        coverages = [run_coverage(r, index, options) for r in runs]
        if any(c.covered for c in coverages):
            continue
        best = max(coverages, key=lambda c: (c.relevance, c.best or ""))
        evaluated = [r for r in runs if r.passed is not None]
        found.append(_finding(
            "uncovered_task_signature", "medium", signature,
            f"no experience covers task signature {signature!r}: {len(runs)} runs, best "
            f"lexical relevance {best.relevance:.2f}"
            + (f" ({best.best})" if best.best else " (no experience used)"),
            {"rollouts": len(runs), "best_relevance": best.relevance,
             "best_experience": best.best,
             "accuracy": _rate(sum(1 for r in evaluated if r.passed), len(evaluated))
             if evaluated else None},
            [run_evidence(r) for r in runs], options))
    return found


def near_duplicates(index: LexicalIndex, options: LearnSettings) -> list[Finding]:
    found = []
    for similarity, a, b in index.similar_pairs(options.duplicate_threshold):
        evidence = [{"ref": f"experience:{n}@{index.blobs[n]}", "experience": n,
                     "blob": index.blobs[n]} for n in (a, b)]
        found.append(_finding(
            "near_duplicate_experiences", "low", f"{a} + {b}",
            f"{a} and {b} are near-duplicates (lexical similarity {similarity:.2f}): "
            "merge them or tell them apart", {"similarity": round(similarity, 4)},
            evidence, options))
    return found


def low_outcome_coverage(data: RunSet, options: LearnSettings) -> list[Finding]:
    covered = sum(1 for r in data.runs if r.outcomes)
    coverage = _rate(covered, len(data.runs))
    if not data.runs or coverage >= options.min_outcome_coverage:
        return []
    missing = [r for r in data.runs if not r.outcomes]
    return [_finding(
        "low_outcome_coverage", "medium" if covered == 0 else "low", "outcomes",
        f"only {covered} of {len(data.runs)} runs ({coverage:.0%}) have an outcome record; "
        f"below {options.min_outcome_coverage:.0%} the outcome statistics say little",
        {"rollouts": len(data.runs), "rollouts_with_outcome": covered,
         "coverage": coverage}, [run_evidence(r) for r in missing], options)]


def find_all(data: RunSet, index: LexicalIndex, options: LearnSettings) -> list[Finding]:
    """Every rule's findings, most severe first (then by type and subject)."""
    findings = (failure_correlations(data, options)
                + uncovered_signatures(data, index, options)
                + near_duplicates(index, options) + low_outcome_coverage(data, options))
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], f.type, f.subject))
