"""``expgit status``: the repository at a glance, read from git alone, changing nothing.

* ``main``: its tip, and its last policy update (:func:`expgit.store.workflow.history.policy_log`);
* the open proposals, each with its measured effect when training measured it;
* the open gradients that no open proposal holds (the ones waiting to be merged);
* the lock: :func:`expgit.store.doctor.diagnose`, the same diagnosis as ``expgit doctor``;
* the sessions waiting to be segmented (:func:`expgit.sessions.status.counts.sessions_ledger`);
* the skills: each one's loads in the ingested sessions, and the active ones no session
  loaded in ``[skills] stale_days`` (:mod:`expgit.sessions.status.skill_usage`);
* the last run: nothing keeps a run's ``--report`` (it is a file the user names), so the
  newest run figures the trainers record in git stand for it: the "Measured effect"
  section training writes into a proposal's description (any state). Read from the
  default ``templates/proposal_evidence.md.j2`` lines; an overridden template's text is
  kept as found, with the figures it no longer shows left null.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import BaseModel

from expgit.sessions.status.counts import SessionLine, sessions_ledger
from expgit.sessions.status.skill_usage import SkillsUsage, skills_usage
from expgit.store.derived.catalog import catalog
from expgit.store.doctor import Diagnosis, diagnose
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import Gradient, list_gradients
from expgit.store.workflow.history import policy_log
from expgit.store.workflow.proposals import Proposal, list_proposals, open_proposal_gradients

EFFECT_HEADING = "## Measured effect"
_SIDE = re.compile(r"^\| (baseline|candidate) \| (\d+/\d+) \| (\d+\.\d+)% \|", re.MULTILINE)
_DELTA = re.compile(r"^Accuracy delta: ([+-]\d+\.\d+)pp", re.MULTILINE)
_GATE = re.compile(r"^Gate: \**([A-Za-z ]+?)\**(?: \(|\.?$)", re.MULTILINE)
_CALLS = re.compile(r"^LLM calls of the run until this measurement: (\d+), cost (\S+?)\.?"
                    r"(?: |$)", re.MULTILINE)


class LastUpdate(BaseModel):
    """The newest commit of ``main`` that changed the experiences."""

    commit: str
    kind: str  # init | proposal | revert | manual
    subject: str
    author: str
    time: int
    proposal: str | None = None


class MeasuredEffect(BaseModel):
    """A proposal's candidate eval, as its description records it (None: not shown)."""

    baseline: str | None = None  # "1/2 (50.00%)"
    candidate: str | None = None
    delta: float | None = None  # in points: +50.0
    gate: str | None = None  # not checked | passed | FAILED | UNDECIDED
    calls: int | None = None  # the run's LLM calls until this measurement
    cost: str | None = None  # as written: "0.004210" or "unknown"


class LastRun(BaseModel):
    """The newest measurement training recorded: its proposal and the figures."""

    proposal: str
    state: str
    time: int
    effect: MeasuredEffect


@dataclass
class RepositoryStatus:
    branch: str
    commit: str
    last_update: LastUpdate | None
    proposals: list[tuple[Proposal, MeasuredEffect | None]]
    gradients: list[Gradient]  # open, in no open proposal
    lock: Diagnosis
    sessions: int
    pending_sessions: list[SessionLine] = field(default_factory=list)
    sessions_branch: str = ""
    last_run: LastRun | None = None
    skills: SkillsUsage | None = None


def measured_effect(description: str) -> MeasuredEffect | None:
    """The "Measured effect" section of a proposal's description; None without one."""
    _, heading, section = description.partition(EFFECT_HEADING)
    if not heading:
        return None
    sides = {side: f"{passed} ({accuracy}%)" for side, passed, accuracy
             in _SIDE.findall(section)}
    delta, gate, calls = _DELTA.search(section), _GATE.search(section), _CALLS.search(section)
    return MeasuredEffect(baseline=sides.get("baseline"), candidate=sides.get("candidate"),
                          delta=float(delta.group(1)) if delta else None,
                          gate=gate.group(1).strip() if gate else None,
                          calls=int(calls.group(1)) if calls else None,
                          cost=calls.group(2) if calls else None)


def _last_update(repo: ExperienceRepository) -> LastUpdate | None:
    updates = policy_log(repo, limit=1)
    return LastUpdate.model_validate(updates[0], from_attributes=True) if updates else None


def _last_run(proposals: list[Proposal]) -> LastRun | None:
    for p in sorted(proposals, key=lambda p: p.time, reverse=True):
        effect = measured_effect(p.description)
        if effect is not None:
            return LastRun(proposal=p.id, state=p.state, time=p.time, effect=effect)
    return None


def repository_status(repo: ExperienceRepository) -> RepositoryStatus:
    """Everything ``expgit status`` shows; reads only."""
    every = list_proposals(repo, ("open", "applied", "rejected"))
    holding = open_proposal_gradients(repo)
    ledger = sessions_ledger(repo)  # read once: the sessions and their skill loads
    sessions = ledger.status
    return RepositoryStatus(
        branch=repo.settings.main_branch, commit=repo.main_commit(),
        last_update=_last_update(repo),
        proposals=[(p, measured_effect(p.description)) for p in every if p.state == "open"],
        gradients=[g for g in list_gradients(repo, ("open",)) if g.commit not in holding],
        lock=diagnose(repo), sessions=sessions.sessions, pending_sessions=sessions.pending,
        sessions_branch=sessions.branch, last_run=_last_run(every),
        skills=skills_usage(repo, catalog(repo).rows, usage=ledger.usage))
