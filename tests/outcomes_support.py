"""Targets for the outcome tests: a stored trajectory (rollout) and an open proposal."""

from __future__ import annotations

from dataclasses import dataclass

from expgit.core.domain import Case, Message, Rollout, Rubric
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import merge
from expgit.train.records.trajectory_store import TrajectoryStore, rollout_id

EXPERIENCE = "checked-baggage-allowance"


@dataclass
class Targets:
    rollout: str  # 16-hex rollout id
    trajectory_uri: str
    experience: str
    proposal: str  # 12-hex proposal id


def make_targets(repo: ExperienceRepository) -> Targets:
    rollout = Rollout(case=Case(name="c1", task_signature="baggage", rubric=Rubric(name="r")),
                      messages=[Message.text("user", "how many bags?"),
                                Message.text("assistant", "one bag of 23 kg")],
                      policy_snapshot_id="snap")
    rid = rollout_id(rollout)
    uri, _ = TrajectoryStore(repo).store(rid, "# trajectory\n", f"trajectory {rid}")
    entry = repo.snapshot().get(EXPERIENCE)
    assert entry is not None
    propose(repo, GradientRequest(name=EXPERIENCE, content=entry.text + "\nMore.\n",
                                  rationale="clearer"))
    proposal = merge(repo)
    return Targets(rollout=rid, trajectory_uri=uri, experience=EXPERIENCE,
                   proposal=proposal.id)
