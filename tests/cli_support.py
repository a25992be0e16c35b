"""The scripted agent the CLI training tests run, and a cases file of given cases."""

from __future__ import annotations

from pathlib import Path

import yaml

from expgit.train.domain import Case, Message, Rollout, RubricEvaluation


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


def unanswered_rollouts(path: Path, case: Case) -> Path:
    """A recorded-rollouts file of one failed run of ``case`` (the agent did not know)."""
    rollout = Rollout(case=case, policy_snapshot_id="recorded",
                      messages=[Message.text("user", "gold member baggage?"),
                                Message.text("assistant", "Sorry, I do not know.")],
                      evaluation=RubricEvaluation(passed=False, score=0.0))
    path.write_text(rollout.model_dump_json() + "\n")
    return path
