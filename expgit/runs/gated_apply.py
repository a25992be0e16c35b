"""``expgit apply PROPOSAL --gate --eval-cases FILE``: the regression gate by hand.

``main`` (baseline) and the proposal as it would land on ``main`` (candidate: the
proposal itself, or its rebuild on a moved ``main``) run the same held-out cases; the
proposal is applied only if the gate passes. Otherwise it stays open and GateError
(exit 6) says why. A changed skill with evals is measured old against new on them too,
and one that does worse there fails the gate (docs/skill-evals.md). The rollouts run
outside the lock; the apply takes it. A proposal made with another agent model than
this eval's gets a warning (in the apply's ``warnings``, or in the error's hint).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from expgit.core.domain import Case, Rollout
from expgit.errors import GateError
from expgit.runs.build import LLMOptions, RunOptions, open_llm_for
from expgit.runs.provenance import agent_warnings
from expgit.runs.wiring import build_pipeline
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import ApplyResult, apply_proposal, build_on, ensure_open
from expgit.store.workflow.proposals import find_proposal
from expgit.train.cases import ListCaseLoader, load_cases
from expgit.train.context import PipelineContext
from expgit.train.measurement.candidate import (
    CandidateReport,
    Gate,
    compare,
    gate_skill_lifts,
    summary_line,
)
from expgit.train.measurement.skill_evals import changed_skill_evals, proposal_skill_lifts


@dataclass
class GatedApply:
    applied: ApplyResult
    candidate: CandidateReport


async def run_gated_apply(repo: ExperienceRepository, proposal_id: str, cases: Path,
                          gate: Gate, *, trials: int = 1,
                          llm: LLMOptions | None = None, concurrency: int = 4,
                          remote: str | None = None) -> GatedApply:
    proposal = find_proposal(repo, proposal_id)
    ensure_open(repo, proposal)
    eval_set = [case for case in load_cases(cases) for _ in range(trials)]
    skill_evals = changed_skill_evals(repo, proposal)  # read (or refused) before any call
    main = repo.main_commit()
    candidate_commit, _ = build_on(repo, proposal, main)  # an unreferenced commit
    options = RunOptions(llm=llm or LLMOptions(), concurrency=concurrency)
    loader = ListCaseLoader(eval_set, len(eval_set))
    async with open_llm_for(repo, options) as runtime:
        made = runtime.provenance()
        warnings = agent_warnings(repo, [proposal.commit], made)
        pipeline = build_pipeline(repo, runtime, concurrency=concurrency)
        baseline = await pipeline.eval(loader, PipelineContext(epoch=0), at=main)
        candidate = await pipeline.eval(loader, PipelineContext(epoch=0),
                                        at=candidate_commit, phase="candidate_eval")

        async def evaluate(commit: str, phase: str, epoch: int,
                           cases: Sequence[Case] | None = None) -> list[Rollout]:
            chosen = ListCaseLoader(cases, len(cases)) if cases else loader
            return (await pipeline.eval(chosen, PipelineContext(epoch=epoch), at=commit,
                                        phase=phase)).rollouts

        lifts = await proposal_skill_lifts(repo, evaluate, main, candidate_commit,
                                           skill_evals, 0, trials)
    report = compare(proposal.id, baseline.rollouts, candidate.rollouts, trials, gate)
    report.skill_lifts = lifts
    report.gate = gate_skill_lifts(gate, report)
    report.agent_model = made.agent_model
    if report.gate.passed is not True:
        raise GateError(f"gate: proposal {proposal.id} was not applied: {report.gate.reason}"
                        f" ({summary_line(report)})",
                        hint=f"it stays open: `expgit review {proposal.id}`, or reject it"
                        + "".join(f"; warning: {w}" for w in warnings))
    applied = apply_proposal(repo, proposal.id, remote=remote)
    applied.warnings.extend(warnings)
    return GatedApply(applied, report)
