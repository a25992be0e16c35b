"""The scripted agent the CLI training tests run, a cases file of given cases, and a
proposal made by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import git
from scripted_pipeline import GOLD_RULE

from expgit.core.domain import Case, Message, Rollout, RubricEvaluation


def agent(messages: list[dict[str, str]]) -> str:
    """Right about baggage; about pets only once an experience about pets is shown."""
    if "gold member" in messages[-1]["content"]:
        return "Gold economy: 3 free checked bags; a 4th costs 50 USD."
    if "pets-in-cabin" in messages[0]["content"]:
        return "Yes: your cat may travel in the cabin."
    return "Sorry, I do not know."



def cases_file(path: Path, *cases: Case) -> Path:
    path.write_text(yaml.safe_dump({"cases": [c.model_dump(mode="json") for c in cases]}))
    return path


def hand_made_proposal(run_cli: Any, path: Path, tmp_path: Path) -> str:
    """In the repository ``path``, a proposal (no model) adding the gold rule to
    checked-baggage-allowance: it helps the baggage case, and confuses a harmful agent."""
    content = tmp_path / "new.md"
    content.write_text(git(path, "show", "main:experiences/checked-baggage-allowance.md")
                       .rstrip("\n") + "\n" + GOLD_RULE)
    assert run_cli("-C", path, "propose", "checked-baggage-allowance", "--content-file",
                   content, "--rationale", "gold members").code == 0
    merged = run_cli("-C", path, "merge", "--all")
    assert merged.code == 0, merged.err
    return str(merged.out.strip())


def unanswered_rollouts(path: Path, case: Case) -> Path:
    """A recorded-rollouts file of one failed run of ``case`` (the agent did not know)."""
    rollout = Rollout(case=case, policy_snapshot_id="recorded",
                      messages=[Message.text("user", "gold member baggage?"),
                                Message.text("assistant", "Sorry, I do not know.")],
                      evaluation=RubricEvaluation(passed=False, score=0.0))
    path.write_text(rollout.model_dump_json() + "\n")
    return path
