"""The offline learning report: recorded rollouts (and outcome records) in, three JSON
files out, and optionally a proposal for review.

Report-only by default: the repository is read (the experiences on ``main``), never
written. The files are written to a temporary folder inside the output folder and then
moved into place one by one (``os.replace``), so no file is ever half-written; a failure
before that leaves the output folder as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from expgit.core.jsonl import load_jsonl
from expgit.core.redaction.messages import Redactor
from expgit.errors import InvalidInputError
from expgit.learn.findings import Finding, find_all
from expgit.learn.lexical import LexicalIndex
from expgit.learn.metrics import compute_metrics
from expgit.learn.propose import LearnProposal, propose_learning
from expgit.learn.runs import build_runs
from expgit.learn.seed_pack import SCHEMA as SEED_SCHEMA
from expgit.learn.seed_pack import Seed, build_seeds
from expgit.outcomes.records import OutcomeRecord
from expgit.runs.run_files import load_rollouts
from expgit.store.format.settings import LearnSettings
from expgit.store.repository import ExperienceRepository

METRICS = "metrics.json"
FINDINGS = "findings.json"
SEED_PACK = "experience_seed_pack.json"
FINDINGS_SCHEMA = "expgit.learn.findings/1"


@dataclass
class LearnResult:
    output_dir: str
    files: list[str]
    rollouts: int
    outcomes: int
    accuracy: float | None
    findings: list[Finding]
    seeds: list[Seed]
    proposal: LearnProposal | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The JSON the CLI prints."""
        return {"output_dir": self.output_dir, "files": self.files,
                "rollouts": self.rollouts, "outcomes": self.outcomes,
                "accuracy": self.accuracy,
                "findings": [{"id": f.id, "type": f.type, "severity": f.severity,
                              "subject": f.subject} for f in self.findings],
                "seeds": [s.name for s in self.seeds],
                "proposal": None if self.proposal is None else {
                    "id": self.proposal.proposal_id, "gradients": self.proposal.gradients,
                    "edits": self.proposal.edits, "skipped": self.proposal.skipped},
                "notes": self.notes}


def _dump(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode()


def write_files(out_dir: Path, files: dict[str, bytes]) -> list[str]:
    """Write every file to a temporary folder in ``out_dir``, then move each into place."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidInputError(f"{out_dir}: not a folder", hint="give -o a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".expgit-learn-", dir=out_dir))
    except OSError as exc:
        raise InvalidInputError(f"{out_dir}: cannot write the report: {exc.strerror}"
                                ) from None
    try:
        for name, data in files.items():
            with open(staging / name, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        for name in files:
            os.replace(staging / name, out_dir / name)
    except OSError as exc:
        raise InvalidInputError(f"{out_dir}: cannot write the report: {exc.strerror}"
                                ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [str(out_dir / name) for name in files]


def learn_report(repo: ExperienceRepository, rollouts_file: Path, out_dir: Path, *,
                 outcomes_file: Path | None = None, propose: bool = False,
                 options: LearnSettings | None = None,
                 progress: Callable[[str], None] | None = None) -> LearnResult:
    """Read the recorded rollouts (and outcomes), write ``metrics.json``,
    ``findings.json`` and ``experience_seed_pack.json`` to ``out_dir``; with
    ``propose``, also commit the seeds and findings as gradients and one proposal."""
    options = options or repo.settings.learn
    say = progress or (lambda _message: None)
    rollouts = load_rollouts(rollouts_file)
    outcomes = (load_jsonl(outcomes_file, OutcomeRecord, "outcomes")
                if outcomes_file is not None else [])
    snapshot = repo.snapshot()
    say(f"read {len(rollouts)} rollouts and {len(outcomes)} outcome records")
    data = build_runs(rollouts, outcomes)
    index = LexicalIndex(snapshot)
    metrics = compute_metrics(data, snapshot, index, options)
    findings = find_all(data, index, options)
    seeds = build_seeds(repo, data, snapshot, index, options)
    # run ids stay those of the rollouts as recorded (outcomes name them); what is
    # written or proposed is redacted
    redactor = Redactor(repo.settings.limits.max_message_chars)
    findings, seeds = redactor.models(findings), redactor.models(seeds)
    say(f"{len(findings)} findings, {len(seeds)} seeds")
    files = write_files(out_dir, {
        METRICS: _dump(metrics),
        FINDINGS: _dump({"schema": FINDINGS_SCHEMA, "snapshot": metrics["snapshot"],
                         "findings": [f.model_dump(mode="json") for f in findings]}),
        SEED_PACK: _dump({"schema": SEED_SCHEMA, "snapshot": metrics["snapshot"],
                          "seeds": [s.model_dump(mode="json") for s in seeds]}),
    })
    result = LearnResult(output_dir=str(out_dir), files=files, rollouts=len(data.runs),
                         outcomes=len(outcomes), accuracy=metrics["overall"]["accuracy"],
                         findings=findings, seeds=seeds)
    if redactor.counts:
        result.notes.append("redacted from the findings and seeds: " + ", ".join(
            f"{kind} {count}" for kind, count in redactor.report().items()))
    if data.unmatched:
        result.notes.append(f"{len(data.unmatched)} outcome records name a rollout or "
                            "trajectory that is not in the rollouts file")
    if propose:
        say("proposing")
        result.proposal = propose_learning(repo, seeds, findings)
        if result.proposal.proposal_id is None:
            result.notes.append("nothing to propose: no uncovered seed and no experience "
                                "correlated with failures")
    return result
