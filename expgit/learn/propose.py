"""``expgit learn --propose``: the seed pack and the findings as one proposal for review.

Through the core API only: each edit is a gradient (:func:`expgit.store.workflow.gradients.propose`,
evidence ``rollout:<id>`` / ``finding:<id>``), the gradients are merged into one proposal
(:func:`expgit.store.workflow.proposals.merge`). ``main`` is never touched; applying the
proposal is the
reviewer's call (``expgit review`` / ``expgit apply``), and reverting it is one command.

Edits:

* a seed whose task no experience on ``main`` covers, and whose name is free: create it
  (a draft experience, see :mod:`expgit.learn.seed_pack`);
* an experience correlated with failures: deprecate it (its status only; the body is
  kept, so the reviewer can restore or correct it).

If anything fails after some gradients were made, their branches are deleted again: the
repository is left as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from expgit.errors import ExpgitError
from expgit.git.repo import RefUpdate
from expgit.learn.findings import Finding
from expgit.learn.seed_pack import Seed
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import Gradient, GradientRequest, propose
from expgit.store.workflow.proposals import merge

MAX_EVIDENCE = 10


@dataclass
class LearnProposal:
    proposal_id: str | None = None
    gradients: list[str] = field(default_factory=list)
    edits: list[str] = field(default_factory=list)  # "create <name>", "deprecate <name>"
    skipped: list[str] = field(default_factory=list)  # why a seed or finding made no edit


def _seed_requests(seeds: Sequence[Seed], findings: Sequence[Finding],
                   result: LearnProposal) -> list[GradientRequest]:
    uncovered = {f.subject: f.id for f in findings if f.type == "uncovered_task_signature"}
    requests = []
    for seed in seeds:
        if seed.exists_on_main:
            result.skipped.append(f"seed {seed.name}: the name is taken on main")
            continue
        if seed.covered_by:
            result.skipped.append(f"seed {seed.name}: {seed.covered_by} already covers "
                                  f"{seed.task_signature!r}")
            continue
        finding = uncovered.get(seed.task_signature)
        evidence = ([f"finding:{finding}"] if finding else []) + [
            f"rollout:{rid}" for rid in seed.source_rollouts]
        requests.append(GradientRequest(
            name=seed.name, content=seed.content, confidence=0.5,
            evidence=evidence[:MAX_EVIDENCE],
            rationale=(f"expgit learn: a draft experience seeded from "
                       f"{seed.well_rated_rollouts} well-rated run(s) of task signature "
                       f"{seed.task_signature!r} (best score {seed.best_score:.2f}); no "
                       "experience on main covers that task. Review it, then make it "
                       "active.")))
        result.edits.append(f"create {seed.name}")
    return requests


def _deprecation_requests(repo: ExperienceRepository, findings: Sequence[Finding],
                          result: LearnProposal) -> list[GradientRequest]:
    snapshot = repo.snapshot()
    requests = []
    for finding in findings:
        if finding.type != "experience_correlated_with_failures":
            continue
        entry = snapshot.get(finding.subject)
        try:
            exp = entry.experience if entry is not None else None
        except ExpgitError:
            exp = None
        if exp is None or exp.status == "deprecated":
            result.skipped.append(f"finding {finding.id}: {finding.subject} is not an "
                                  "active experience on main")
            continue
        evidence = [f"finding:{finding.id}", *(str(e["ref"]) for e in finding.evidence)]
        requests.append(GradientRequest(
            name=finding.subject, content=exp.with_fields(status="deprecated").render(),
            evidence=evidence[:MAX_EVIDENCE],
            confidence=float(finding.metrics.get("failure_rate", 0.5)),
            rationale=(f"expgit learn finding {finding.id}: {finding.summary}. Deprecate "
                       "it until it is corrected (its body is kept; revert to restore).")))
        result.edits.append(f"deprecate {finding.subject}")
    return requests


def propose_learning(repo: ExperienceRepository, seeds: Sequence[Seed],
                     findings: Sequence[Finding]) -> LearnProposal:
    """Gradients and one proposal from the seeds and findings; no proposal (and no write)
    when they call for no edit."""
    result = LearnProposal()
    requests = _seed_requests(seeds, findings, result) + \
        _deprecation_requests(repo, findings, result)
    if not requests:
        return result
    made: list[Gradient] = []
    try:
        for request in requests:
            made.append(propose(repo, request))
        proposal = merge(repo, [g.id for g in made])
    except BaseException:
        if made:  # leave no stray gradient behind
            repo.git.update_refs([RefUpdate(g.ref, None, g.commit) for g in made],
                                 "expgit learn: undo gradients of a failed proposal")
        raise
    result.gradients = [g.id for g in made]
    result.proposal_id = proposal.id
    return result
