"""Policy updaters: the write boundary of training (docs/design.md,
"One batch").

* :class:`GitPolicyUpdater` turns the plan into a proposal (the core's ``commit_plan``:
  a proposal branch and its PR description) and, in apply mode, applies it to ``main``
  with the core's guarded compare-and-swap (``apply_proposal_locked``: the caller, the
  training engine, holds the repository lock); with a ``remote``, to the remote's
  ``main`` by lease and retry (``apply_proposal_locked`` with it, as ``apply --remote``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from expgit.core.domain import ApplyNotes, ExperienceSetRef, PolicyApplyResult, PolicyUpdatePlan
from expgit.errors import ConflictError, ExpgitError, InvalidInputError
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.provenance import Provenance
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow import apply as core_apply
from expgit.store.workflow.gradients import Gradient, find_gradient
from expgit.store.workflow.proposals import MergePlan, PlanItem, Proposal, commit_plan
from expgit.train.context import PipelineContext

MERGER_NAME = "llm patch-merge"


def set_ref(snapshot: Snapshot) -> ExperienceSetRef:
    return ExperienceSetRef(commit=snapshot.commit, snapshot_id=snapshot.id)


def _text(snapshot: Snapshot, name: str) -> str | None:
    entry = snapshot.get(name)
    return entry.data.decode("utf-8", "replace") if entry else None


class GitPolicyUpdater:
    """Commits a plan as a proposal branch with its PR description (written to
    ``pr_body`` too, if given); with ``context.mode == "apply"`` applies it to ``main``
    (guard + CAS; the caller holds the lock). The proposal lists the cited gradients and
    those the merger dropped (``plan.metadata.dropped_gradient_ids``), so applying or
    rejecting it closes them all. A plan whose ``before_content`` differs from
    ``policy_set`` raises ConflictError before anything is written; an apply refused by
    the guard leaves ``main`` and the open proposal as they are and is reported in
    ``errors``."""

    def __init__(self, repo: ExperienceRepository, pr_body: Path | None = None, *,
                 remote: str | None = None, provenance: Provenance | None = None) -> None:
        self.repo = repo
        self.pr_body = pr_body
        self.remote = remote
        self.provenance = provenance  # the models, named in trailers and the description

    async def apply(self, plan: PolicyUpdatePlan, policy_set: Snapshot,
                    context: PipelineContext) -> PolicyApplyResult:
        if not plan.items:
            return PolicyApplyResult(updated_policy_set=set_ref(policy_set))
        proposal = await asyncio.to_thread(self._propose, plan, policy_set)
        result = PolicyApplyResult(
            updated_policy_set=set_ref(policy_set), proposal_id=proposal.id,
            written=[i.target_experience_name for i in plan.items
                     if i.kind == "upsert_experience"],
            deleted=[i.target_experience_name for i in plan.items
                     if i.kind == "delete_experience"],
            metadata=ApplyNotes(proposal_commit=proposal.commit, proposal_ref=proposal.ref,
                                mode=context.mode))
        if context.mode != "apply":
            return result
        try:
            if self.remote is None:
                applied = await asyncio.to_thread(core_apply.apply_proposal_locked,
                                                  self.repo, proposal.id)
            else:
                applied = await asyncio.to_thread(core_apply.apply_proposal_locked,
                                                  self.repo, proposal.id, self.remote)
        except ExpgitError as exc:  # with a remote: a refused or failed push as well
            if self.remote is None and not isinstance(exc, ConflictError):
                raise
            result.errors.append(f"proposal {proposal.id} was not applied: {exc.message}")
            return result
        snapshot = await asyncio.to_thread(self.repo.snapshot, applied.commit)
        result.applied_commit = applied.commit
        result.updated_policy_set = set_ref(snapshot)
        result.metadata.rebased, result.metadata.warnings = (applied.rebased,
                                                             list(applied.warnings))
        return result

    def _propose(self, plan: PolicyUpdatePlan, policy_set: Snapshot) -> Proposal:
        stale = [i.target_experience_name for i in plan.items
                 if i.before_content != _text(policy_set, i.target_experience_name)]
        if stale:
            raise ConflictError("the plan was made on other content than the policy set "
                                "it is applied to: " + ", ".join(stale), conflicts=stale,
                                hint="plan again on the current main")
        gradients: dict[str, Gradient] = {}
        for item in plan.items:
            for gid in item.gradient_ids:
                if gid not in gradients:
                    gradients[gid] = find_gradient(self.repo, gid)
        for gid in plan.metadata.dropped_gradient_ids or []:
            try:  # considered and dropped by the merger: closed with the proposal
                gradients.setdefault(gid, find_gradient(self.repo, gid))
            except InvalidInputError:
                continue
        items = [PlanItem(name=i.target_experience_name, after=i.after_content,
                          gradients=[gradients[g] for g in i.gradient_ids],
                          confidence=0.5 if i.confidence is None else i.confidence,
                          rationale=i.rationale or "merged from gradients",
                          evidence=list(i.evidence_trajectory_uris))
                 for i in plan.items]
        return commit_plan(self.repo, MergePlan(items=items), policy_set.commit, policy_set,
                           list(gradients.values()), MERGER_NAME, self.pr_body,
                           provenance=self.provenance)
