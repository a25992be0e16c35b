"""``expgit learn`` on a recorded rollout file (tests/fixtures/learn): metrics, findings
with stable ids and capped evidence, the seed pack, and ``--propose``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Driver, fsck, repo_state
from json_shapes import assert_shape

from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import find_proposal

FIXTURES = ROOT / "tests" / "fixtures" / "learn"
ROLLOUTS = FIXTURES / "rollouts.jsonl"
OUTCOMES = FIXTURES / "outcomes.jsonl"
FILES = ["metrics.json", "findings.json", "experience_seed_pack.json"]


def learn(driver: Driver, out: Path, *extra: str | Path) -> dict[str, Any]:
    result = driver.ok("learn", "--rollouts", ROLLOUTS, "--outcomes", OUTCOMES, "-o", out,
                       "--json", *extra)
    summary = json.loads(result.out)
    assert_shape("learn", summary)
    return summary  # type: ignore[no-any-return]


def read(out: Path, name: str) -> Any:
    return json.loads((out / name).read_text())


def test_report_only_writes_the_three_files_and_nothing_in_git(
        driver: Driver, tmp_path: Path) -> None:
    before = driver.state()
    summary = learn(driver, tmp_path / "out")
    assert driver.state() == before  # report-only: no ref, no object
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(FILES)
    assert summary["rollouts"] == 18 and summary["outcomes"] == 4
    assert summary["proposal"] is None

    metrics = read(tmp_path / "out", "metrics.json")
    sig = metrics["task_signatures"]
    assert (sig["checked-baggage"]["accuracy"], sig["flight-change"]["accuracy"],
            sig["pets-in-cabin"]["accuracy"], sig["cancellation"]["accuracy"]) == \
        (0.8, 0.0, 0.75, 1.0)
    assert sig["pets-in-cabin"]["covered_rollouts"] == 0
    assert metrics["overall"]["accuracy"] == round(11 / 18, 4)
    coverage = metrics["outcome_coverage"]
    assert (coverage["records"], coverage["matched"], coverage["unmatched"],
            coverage["rollouts_with_outcome"]) == (4, 2, 1, 2)
    stats = metrics["experiences"]
    bags = stats["checked-baggage-allowance"]
    # used in 5 runs (4 passed); a "pass" on one of its trajectories + a "helpful" on it
    assert (bags["times_used"], bags["passed"], bags["failed"], bags["helpful"],
            bags["harmful"], bags["mean_score"]) == (5, 4, 1, 2, 0, 0.8)
    flights = stats["flight-change-rules"]
    assert (flights["times_used"], flights["failed"], flights["harmful"]) == (5, 5, 1)
    assert stats["when-to-transfer-to-human"]["times_used"] == 9


def test_findings_have_stable_ids_and_capped_evidence(driver: Driver,
                                                      tmp_path: Path) -> None:
    learn(driver, tmp_path / "one")
    learn(driver, tmp_path / "two")
    for name in FILES:  # deterministic: the same inputs give the same files
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    findings = {f["type"]: f for f in read(tmp_path / "one", "findings.json")["findings"]}
    assert set(findings) == {"experience_correlated_with_failures",
                             "uncovered_task_signature", "low_outcome_coverage"}
    failing = findings["experience_correlated_with_failures"]
    assert failing["subject"] == "flight-change-rules" and failing["severity"] == "high"
    assert failing["metrics"]["failure_rate"] == 1.0
    assert findings["uncovered_task_signature"]["subject"] == "pets-in-cabin"
    coverage = findings["low_outcome_coverage"]
    assert coverage["evidence_total"] == 16 and len(coverage["evidence"]) == 10
    refs = [e["ref"] for e in coverage["evidence"]]
    assert refs == sorted(refs) and all(r.startswith("rollout:") for r in refs)
    for finding in findings.values():
        assert len(finding["id"]) == 16 and len(finding["evidence"]) <= 10
    # a different input (one outcome record fewer) changes the coverage finding's id only
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text("".join(OUTCOMES.read_text().splitlines(keepends=True)[1:]))
    driver.ok("learn", "--rollouts", ROLLOUTS, "--outcomes", fewer, "-o", tmp_path / "three")
    again = {f["type"]: f["id"] for f in read(tmp_path / "three", "findings.json")["findings"]}
    assert again["uncovered_task_signature"] == findings["uncovered_task_signature"]["id"]
    assert again["low_outcome_coverage"] != coverage["id"]


def test_seed_pack_from_well_rated_runs(driver: Driver, tmp_path: Path) -> None:
    learn(driver, tmp_path / "out")
    seeds = {s["name"]: s for s in read(tmp_path / "out", "experience_seed_pack.json")["seeds"]}
    assert set(seeds) == {"cancellation", "checked-baggage", "pets-in-cabin"}
    pets = seeds["pets-in-cabin"]
    assert pets["covered_by"] is None and pets["well_rated_rollouts"] == 3
    assert pets["best_score"] == 1.0 and len(pets["source_rollouts"]) == 3
    assert "status: draft" in pets["content"] and "`get_pet_policy`" in pets["content"]
    assert "closed carrier" in pets["content"] and "I do not know" not in pets["content"]
    assert seeds["checked-baggage"]["covered_by"] == "checked-baggage-allowance"


def test_propose_makes_a_reviewable_proposal_and_leaves_main(
        driver: Driver, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    main = driver.rev()
    summary = learn(driver, tmp_path / "out", "--propose")
    assert driver.rev() == main  # main untouched
    proposal = summary["proposal"]
    assert proposal["edits"] == ["create pets-in-cabin", "deprecate flight-change-rules"]
    assert len(proposal["gradients"]) == 2 and len(proposal["skipped"]) == 2
    found = find_proposal(seeded_repo, proposal["id"])
    assert found.state == "open" and found.base == main
    assert {(c.name, c.operation) for c in found.changes} == {
        ("pets-in-cabin", "create"), ("flight-change-rules", "update")}
    branch = f"expgit/proposals/{proposal['id']}"
    assert "status: deprecated" in driver.text("flight-change-rules", branch)
    assert "status: draft" in driver.text("pets-in-cabin", branch)
    findings = {f["type"]: f["id"] for f in read(tmp_path / "out", "findings.json")["findings"]}
    log = driver.git("log", "--format=%B", "--no-walk", *(
        f"expgit/gradients/{g}" for g in proposal["gradients"]))
    assert f"Expgit-Evidence: finding:{findings['experience_correlated_with_failures']}" in log
    assert f"Expgit-Evidence: finding:{findings['uncovered_task_signature']}" in log
    fsck(driver.path)
    # the reviewer applies it like any proposal
    driver.apply(proposal["id"])
    assert "status: deprecated" in driver.text("flight-change-rules")


def test_near_duplicate_experiences(driver: Driver, tmp_path: Path) -> None:
    text = driver.text("refund-method-rules").replace("name: refund-method-rules",
                                                      "name: refund-method-rules-copy")
    driver.apply(driver.merge(driver.propose("refund-method-rules-copy", text)))
    learn(driver, tmp_path / "out")
    duplicates = [f for f in read(tmp_path / "out", "findings.json")["findings"]
                  if f["type"] == "near_duplicate_experiences"]
    assert [f["subject"] for f in duplicates] == ["refund-method-rules + "
                                                  "refund-method-rules-copy"]
    assert duplicates[0]["metrics"]["similarity"] >= 0.8


def test_bad_input_changes_nothing(driver: Driver, tmp_path: Path) -> None:
    before = driver.state()
    out = tmp_path / "out"
    driver.fails(5, "learn", "--rollouts", tmp_path / "missing.jsonl", "-o", out)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(OUTCOMES.read_text() + '{"target_kind": "rollout"}\n')
    result = driver.fails(5, "learn", "--rollouts", ROLLOUTS, "--outcomes", bad, "-o", out)
    assert "line 5" in result.err
    assert not out.exists() and driver.state() == before
    afile = tmp_path / "afile"
    afile.write_text("keep")
    driver.fails(2, "learn", "--rollouts", ROLLOUTS, "-o", afile)  # click: not a folder
    assert afile.read_text() == "keep"
    # an existing folder keeps its other files; ours are replaced whole
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "metrics.json").write_text("stale")
    driver.ok("learn", "--rollouts", ROLLOUTS, "-o", out)
    assert (out / "notes.txt").read_text() == "mine"
    assert read(out, "metrics.json")["overall"]["rollouts"] == 18
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "notes.txt"])


def test_repo_state_helper_sees_writes(driver: Driver, tmp_path: Path) -> None:
    """The no-write assertions above are meaningful: --propose does change the state."""
    before = repo_state(driver.path)
    learn(driver, tmp_path / "out", "--propose")
    assert repo_state(driver.path) != before


def test_a_failed_proposal_leaves_no_gradient_behind(
        driver: Driver, seeded_repo: ExperienceRepository, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import expgit.learn.propose as learn_propose
    from expgit.errors import ConflictError
    from expgit.learn.report import learn_report

    def refuse(*args: object, **kwargs: object) -> None:
        raise ConflictError("main moved")

    monkeypatch.setattr(learn_propose, "merge", refuse)
    refs = driver.git("for-each-ref")
    with pytest.raises(ConflictError):
        learn_report(seeded_repo, ROLLOUTS, tmp_path / "out", outcomes_file=OUTCOMES,
                     propose=True)
    assert driver.git("for-each-ref") == refs  # both gradients were deleted again
    assert (tmp_path / "out" / "findings.json").exists()  # the report itself was written


def test_thresholds_come_from_the_learn_section_and_flags_override_them(
        driver: Driver, tmp_path: Path) -> None:
    settings = driver.path / "expgit.toml"
    settings.write_text(settings.read_text() + "\n[learn]\nmax_evidence = 3\n"
                        "min_outcome_coverage = 0.05\n")
    driver.git("commit", "-q", "-am", "learn thresholds")
    learn(driver, tmp_path / "set")
    findings = {f["type"]: f for f in read(tmp_path / "set", "findings.json")["findings"]}
    assert "low_outcome_coverage" not in findings  # 2/18 runs covered: over 0.05
    assert all(len(f["evidence"]) <= 3 for f in findings.values())
    assert len(findings["experience_correlated_with_failures"]["evidence"]) == 3
    learn(driver, tmp_path / "flags", "--max-evidence", "1", "--min-outcome-coverage", "0.5")
    flagged = {f["type"]: f for f in read(tmp_path / "flags", "findings.json")["findings"]}
    assert len(flagged["low_outcome_coverage"]["evidence"]) == 1
    assert all(len(f["evidence"]) == 1 for f in flagged.values())
    before = driver.state()
    bad = driver.fails(2, "learn", "--rollouts", ROLLOUTS, "-o", tmp_path / "bad",
                       "--failure-margin", "1.5")
    assert "--failure-margin" in bad.err and not (tmp_path / "bad").exists()
    assert driver.state() == before
