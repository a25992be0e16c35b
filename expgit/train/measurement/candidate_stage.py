"""Candidate eval during training: each new proposal's snapshot runs the held-out cases
(phase ``candidate_eval``); its figures against its base go into its PR description
(:func:`expgit.store.workflow.proposals.annotate_proposal`: same tree, parent and trailers, and
one ``Expgit-Prediction`` trailer per edit that predicted a flip: hit, miss or unchecked,
:mod:`expgit.train.measurement.predictions`), and
in apply mode it is applied only if the gate passes (or no gate is set). A proposal the
gate does not pass stays open for review. A candidate eval that fails (the model down)
leaves the proposal as it was, and its gate undecided.

Baselines are remembered by tree: the baseline eval of ``main``, then each candidate's,
so the only extra cost is one pass over the eval cases per proposal. In apply mode the
final eval of ``main`` reuses what measured its tree (:meth:`CandidateStage.measured`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from expgit.core.domain import Case, Rollout
from expgit.errors import ConflictError, ExpgitError
from expgit.llm.port import StageUsage
from expgit.store.derived.predictions import gradient_predictions, verdict_trailers
from expgit.store.format import templates
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import apply_proposal
from expgit.store.workflow.proposals import Proposal, annotate_proposal, find_proposal
from expgit.train.measurement.candidate import (
    CandidateReport,
    Gate,
    compare,
    gate_skill_lifts,
    undecided,
)
from expgit.train.measurement.predictions import check_predictions
from expgit.train.measurement.skill_evals import changed_skill_evals, proposal_skill_lifts


class Evaluate(Protocol):
    """(commit to evaluate, phase, epoch) -> the rollouts of every eval case at that
    commit; with ``cases``: of those cases instead (a changed skill's own evals)."""

    def __call__(self, commit: str, phase: str, epoch: int,
                 cases: Sequence[Case] | None = None) -> Awaitable[list[Rollout]]: ...


@dataclass
class Reviewed:
    """What became of one proposal: its final id, and main's commit if applied."""

    proposal: str
    applied_commit: str | None = None
    error: str | None = None


@dataclass
class CandidateStage:
    repo: ExperienceRepository
    trials: int = 1
    gate: Gate | None = None
    apply: bool = False  # apply mode: apply each proposal the gate lets through
    usage: Callable[[], StageUsage] | None = None
    agent_model: str | None = None  # the agent model the eval runs with
    reports: list[CandidateReport] = field(default_factory=list)
    _by_tree: dict[str, tuple[str, list[Rollout]]] = field(default_factory=dict)

    def remember(self, commit: str, rollouts: list[Rollout],
                 phase: str = "baseline_eval") -> None:
        """``rollouts``: the eval cases run at ``commit`` by ``phase``."""
        self._by_tree[self.repo.git.read_commit(commit).tree] = (phase, rollouts)

    def measured(self, commit: str) -> tuple[str, list[Rollout]] | None:
        """The phase of this run that measured ``commit``'s tree, and its rollouts; None:
        no phase did."""
        return self._by_tree.get(self.repo.git.read_commit(commit).tree)

    async def _at(self, evaluate: Evaluate, commit: str, phase: str, epoch: int
                  ) -> list[Rollout]:
        tree = await asyncio.to_thread(lambda: self.repo.git.read_commit(commit).tree)
        if tree not in self._by_tree:
            self._by_tree[tree] = (phase, await evaluate(commit, phase, epoch))
        return self._by_tree[tree][1]

    async def review(self, evaluate: Evaluate, proposal_ids: Sequence[str], epoch: int
                     ) -> list[Reviewed]:
        return [await self._review(evaluate, pid, epoch) for pid in proposal_ids]

    async def _review(self, evaluate: Evaluate, pid: str, epoch: int) -> Reviewed:
        proposal = await asyncio.to_thread(find_proposal, self.repo, pid)
        # a changed skill's evals are read (and a malformed file refused) before any call
        skill_evals = await asyncio.to_thread(changed_skill_evals, self.repo, proposal)
        baseline = await self._at(evaluate, proposal.base, "baseline_eval", epoch)
        try:
            candidate = await evaluate(proposal.commit, "candidate_eval", epoch)
        except ExpgitError as exc:  # left as it was: open, not applied
            self.reports.append(undecided(pid, baseline, self.trials, self.gate,
                                          exc.message))
            self.reports[-1].agent_model = self.agent_model
            return Reviewed(pid, error=f"proposal {pid} was not measured"
                            + (" nor applied" if self.apply else "")
                            + f": its candidate eval failed: {exc.message}")
        report = compare(pid, baseline, candidate, self.trials, self.gate)
        report.skill_lifts = await proposal_skill_lifts(
            self.repo, evaluate, proposal.base, proposal.commit, skill_evals, epoch,
            self.trials)
        report.gate = gate_skill_lifts(self.gate, report)
        predicted = await asyncio.to_thread(gradient_predictions, self.repo,
                                            proposal.gradient_commits)
        report.predictions, report.unpredicted_flips = check_predictions(
            predicted, baseline, candidate)
        report.agent_model = self.agent_model
        final = await asyncio.to_thread(self._annotate, proposal, report)
        report.proposal = final.id
        self.reports.append(report)
        self.remember(final.commit, candidate, "candidate_eval")
        if not self.apply or (report.gate.checked and report.gate.passed is not True):
            return Reviewed(final.id)
        try:
            applied = await asyncio.to_thread(apply_proposal, self.repo, final.id)
        except ConflictError as exc:
            return Reviewed(final.id, error=f"proposal {final.id} was not applied: "
                            f"{exc.message}")
        return Reviewed(final.id, applied.commit)

    def _annotate(self, proposal: Proposal, report: CandidateReport) -> Proposal:
        usage = self.usage() if self.usage is not None else None
        tree = self.repo.git.read_commit(proposal.commit).tree
        evidence = templates.render("proposal_evidence.md.j2", self.repo, report=report,
                                    tree=tree, base=proposal.base, usage=usage,
                                    main_branch=self.repo.settings.main_branch)
        verdicts = verdict_trailers((c.gradient_commit, c.verdict) for c in report.predictions)
        return annotate_proposal(self.repo, proposal, evidence, trailers=verdicts)
