"""``expgit outcomes add|list`` through the real CLI."""

from __future__ import annotations

import json

import pytest
from conftest import Driver, run_expgit
from outcomes_support import make_targets

from expgit.store.repository import ExperienceRepository


def add_args(kind: str, target: str, key: str, *extra: str) -> list[str]:
    return ["outcomes", "add", "--target-kind", kind, "--target", target, "--verdict",
            "harmful", "--score", "0.2", "--idempotency-key", key, *extra]


def test_add_repeat_and_list(driver: Driver, seeded_repo: ExperienceRepository) -> None:
    targets = make_targets(seeded_repo)
    main = driver.rev()
    out = driver.ok(*add_args("experience", targets.experience, "cli-1",
                              "--reason", "stale rule", "--json")).out
    first = json.loads(out)
    assert first["created"] is True
    assert first["outcome"]["source"] == "cli" and first["outcome"]["reason"] == "stale rule"
    again = driver.ok(*add_args("experience", targets.experience, "cli-1",
                                "--reason", "stale rule", "--json")).out
    assert json.loads(again) == {"created": False, "outcome": first["outcome"]}
    human = driver.ok(*add_args("proposal", targets.proposal, "cli-2", "--source", "ana")).out
    assert human.startswith("Recorded outcome ") and f"proposal {targets.proposal}" in human
    assert "(by ana)" in human

    listed = json.loads(driver.ok("outcomes", "list", "--json").out)["outcomes"]
    assert [o["idempotency_key"] for o in listed] == ["cli-1", "cli-2"]
    one = json.loads(driver.ok("outcomes", "list", "--target-kind", "proposal", "--target",
                               targets.proposal[:8], "--json").out)["outcomes"]
    assert [o["idempotency_key"] for o in one] == ["cli-2"]
    table = driver.ok("outcomes", "list")
    assert "harmful 0.20 on experience checked-baggage-allowance" in table.out
    assert "2 outcomes" in table.err
    assert driver.rev() == main


def test_bad_input_changes_nothing(driver: Driver, seeded_repo: ExperienceRepository) -> None:
    targets = make_targets(seeded_repo)
    before = driver.state()
    missing = driver.fails(5, *add_args("experience", "not-there", "k1"))
    assert "no experience 'not-there'" in missing.err and "expgit list" in missing.err
    wrong = driver.fails(3, *add_args("rollout", targets.experience, "k2"))
    assert "is an experience, not a rollout" in wrong.err
    driver.fails(2, "outcomes", "add", "--target-kind", "experience", "--target",
                 targets.experience, "--verdict", "harmful", "--score", "1.5",
                 "--idempotency-key", "k3")
    no_key = driver.fails(2, "outcomes", "add", "--target-kind", "experience", "--target",
                          targets.experience, "--verdict", "pass", "--score", "1")
    assert "--idempotency-key" in no_key.err
    long_reason = driver.fails(5, *add_args("experience", targets.experience, "k4",
                                            "--reason", "x" * 3000))
    assert "--reason" in long_reason.err
    assert driver.state() == before
    driver.ok(*add_args("experience", targets.experience, "k5"))
    reuse = driver.fails(3, "outcomes", "add", "--target-kind", "experience", "--target",
                         targets.experience, "--verdict", "helpful", "--score", "0.2",
                         "--idempotency-key", "k5")
    assert "already used for a different outcome" in reuse.err
    driver.fails(2, "outcomes", "list", "--target", "x")


@pytest.mark.slow
def test_help_and_subprocess(driver: Driver) -> None:
    result = run_expgit("outcomes", "add", "--help")
    assert result.returncode == 0 and "--idempotency-key" in result.stdout
    assert "analytics only" in run_expgit("outcomes", "--help").stdout
    listed = run_expgit("-C", driver.path, "outcomes", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"outcomes": []}
