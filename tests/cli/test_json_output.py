"""``--json`` output: exactly what ``json.dumps(data, indent=2, default=str)`` writes, and
each command's document has the shape docs/json-output.md's tables document."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file, unanswered_rollouts
from conftest import EXAMPLE, ROOT, CliResult, Driver, edited
from json_shapes import assert_shape, documented, documented_keys
from scripted_pipeline import BAGGAGE_CASE, edit_reply, reflect_with

from expgit.cli._json import pretty_json
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

EDGES: list[Any] = [
    {}, [], (), "", 0, None, True, 1.5, float("nan"), "ünïcode ✓",
    {"a": {}, "b": [], "c": [{}], "d": [[]]},
    {"text": 'a string with ,\n  "quotes" and a separator inside', "n": 3},
    {3: "int key", None: "null key", True: "bool key", 2.5: "float key"},
    {"nested": {1: {"deep": [1, (2, 3), {"x": None}]}}},
    {"when": datetime(2026, 12, 1, tzinfo=UTC), "set": {1}},
    [{"name": f"row-{i}", "version": i, "problem": None} for i in range(50)],
]


def random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-10**6, 10**6)
    if kind == 2:
        return rng.random() * 100
    if kind in (3, 4):
        return "".join(rng.choice("ab ,:\n\"\\é{}[]") for _ in range(rng.randrange(8)))
    if kind in (5, 6):
        return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randrange(5))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


@pytest.mark.parametrize("value", EDGES, ids=range(len(EDGES)))
def test_edge_cases_match_the_standard_library(value: Any) -> None:
    assert pretty_json(value) == json.dumps(value, indent=2, default=str)


def test_random_documents_match_the_standard_library() -> None:
    rng = random.Random(20261201)
    for _ in range(2000):
        value = random_value(rng, 0)
        assert pretty_json(value) == json.dumps(value, indent=2, default=str)


def test_random_tables_of_rows_match_the_standard_library() -> None:
    """Lists of flat rows (the fast path), with strings that look like its separators."""
    rng = random.Random(7)
    tricky = ["}, {", '},\n    {', "{", "}", "\n", "  ", ",", '"', ""]
    for _ in range(500):
        rows = [{f"f{j}": rng.choice([*tricky, None, 1, 2.5, True])
                 for j in range(rng.randrange(1, 5))} for _ in range(rng.randrange(1, 6))]
        value: Any = {"rows": rows} if rng.random() < 0.5 else rows
        assert pretty_json(value) == json.dumps(value, indent=2, default=str)


# ------------------------------------------------------ each command's shape, real CLI
# docs/json-output.md's tables are the spec: json_shapes reads them, and each test
# runs one command and compares its document with its row (exact key sets, ids 12 hex,
# commits 40 hex, times whole seconds).

BAGS = "checked-baggage-allowance"
# Rows whose command needs a scripted model or a fixture of another test module: that
# module checks the shape (it must call assert_shape with the row's name).
ELSEWHERE = {
    "train": "tests/cli/test_cli_train.py",
    "learn": "tests/learn/test_learn_report.py",
    "export": "tests/store/test_skill_export.py",
    "export-sft": "tests/sessions/test_sessions_export.py",
    "sessions ingest": "tests/sessions/test_sessions_run.py",
    "sessions status": "tests/sessions/test_sessions_run.py",
    "sessions run": "tests/sessions/test_sessions_run.py",
    "pr": "tests/cli/test_cli_pr.py",
    "doctor": "tests/store/test_doctor.py",
    "status": "tests/cli/test_status.py",
    "evidence": "tests/cli/test_cli_evidence.py",
    "migrate": "tests/store/test_migrate.py",
}


def shape(label: str, result: CliResult) -> dict[str, Any]:
    """``result``'s document, checked against docs/json-output.md's row ``label``."""
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert_shape(label, data)
    return data  # type: ignore[no-any-return]


def test_the_tables_parse_into_key_sets() -> None:
    """The check below can fail: the page's rows are read, spreads resolved."""
    assert documented_keys("proposals") == {"proposals", "skipped"}
    assert documented_keys("review GRADIENT") == documented_keys("propose") | {"diffs",
                                                                               "note"}
    assert "gradient_commits" in documented_keys("merge")
    with pytest.raises(AssertionError, match="undocumented"):
        assert_shape("validate", {"commit": "0" * 40, "valid": True, "problems": [],
                                  "extra": 1})
    with pytest.raises(AssertionError):  # a 40-hex value where an id belongs
        assert_shape("reject", {"id": "0" * 12, "kind": "proposal", "commit": "0" * 40,
                                "reason": "r", "gradients": ["0" * 40]})
    with pytest.raises(AssertionError, match="bare list"):
        assert_shape("proposals", [])


def test_the_workflow_commands(driver: Driver, seeded_repo: ExperienceRepository,
                               run_cli: Any, tmp_path: Path) -> None:
    """init, propose, gradients, merge, proposals, review, apply, list, show, log,
    revert, validate, reject: every document an object of exactly its row's keys."""
    shape("init", run_cli("init", tmp_path / "other", "--from", EXAMPLE, "--json"))
    content = driver.file(edited(BAGS, "\nOne more rule.\n", seeded_repo))
    gradient = shape("propose", driver("propose", BAGS, "--content-file", content,
                                       "--rationale", "a rule", "--evidence", "e1",
                                       "--json"))
    other = driver.propose("pets-in-cabin", "---\nname: pets-in-cabin\nsummary: pets\n"
                           "---\nCats may fly in the cabin.\n")
    proposal = shape("merge", driver("merge", gradient["id"], "--json"))
    assert proposal["gradients"] == [gradient["id"]]
    assert proposal["gradient_commits"] == [gradient["commit"]]
    listed = shape("gradients", driver("gradients", "--json"))
    assert [g["id"] for g in listed["gradients"]] == [other]
    assert listed["hidden_merged"] == 1
    merged = shape("gradients", driver("gradients", "--merged", "--json"))
    assert {g["id"]: g["proposal"] for g in merged["gradients"]} == {
        gradient["id"]: proposal["id"], other: None} and merged["hidden_merged"] == 0
    merged_view = {k: v for k, v in proposal.items() if k != "skipped"}
    assert proposal["skipped"] == []  # no stray branch here
    assert shape("proposals", driver("proposals", "--json"))["proposals"] == [merged_view]
    shape("review PROPOSAL", driver("review", proposal["id"], "--json"))
    shape("review GRADIENT", driver("review", other, "--json"))
    applied = shape("apply", driver("apply", proposal["id"], "--json"))
    assert applied["proposal"] == proposal["id"]
    shape("list", driver("list", "--json"))
    shape("list --stats", driver("list", "--stats", "--json"))
    usage = shape("list --usage", driver("list", "--usage", "--json"))
    assert {"loads_30d", "last_load", "loads"} == set(usage["experiences"][0]["usage"])
    shape("show", driver("show", BAGS, "--json"))
    context = shape("context", driver("context", "free checked bags", "--top-k", "1",
                                      "--json"))
    assert [e["name"] for e in context["experiences"]] == [BAGS]
    log = shape("log", driver("log", "--json"))
    assert log["commit"] == applied["commit"] == log["updates"][0]["commit"]
    assert log["updates"][0]["proposal"] == proposal["id"]
    assert [g["id"] for g in log["updates"][0]["gradients"]] == [gradient["id"]]
    reverted = shape("revert", driver("revert", applied["commit"], "--json"))
    log = shape("log", driver("log", "-n", "2", "--json"))
    assert log["updates"][0]["reverts"] == applied["commit"]
    assert log["updates"][1]["reverted_by"] == [reverted["commit"]]
    shape("validate", driver("validate", "--json"))
    shape("reject", driver("reject", other, "--reason", "not now", "--json"))
    assert shape("proposals", driver("proposals", "--json")) == {"proposals": [], "skipped": []}


def test_a_proposal_rejected_names_its_gradients_by_id(
        driver: Driver, seeded_repo: ExperienceRepository) -> None:
    gid = driver.propose(BAGS, edited(BAGS, "\nOne more rule.\n", seeded_repo))
    pid = driver.merge(gid)
    rejected = shape("reject", driver("reject", pid, "--reason", "no", "--json"))
    assert rejected["gradients"] == [gid]


def test_hooks_and_outcomes(driver: Driver) -> None:
    assert shape("hooks install", driver("hooks", "install", "--json"))["hooks"]
    added = shape("outcomes add", driver(
        "outcomes", "add", "--target-kind", "experience", "--target", BAGS, "--verdict",
        "helpful", "--score", "0.9", "--idempotency-key", "k1", "--json"))
    assert type(added["outcome"]["created_at"]) is int
    listed = shape("outcomes list", driver("outcomes", "list", "--json"))
    assert listed["outcomes"] == [added["outcome"]]


def test_eval_and_train_rollouts(driver: Driver, serve: Any, tmp_path: Path) -> None:
    server = serve([Step("rollout", agent)])
    shape("eval", driver("eval", "--cases", cases_file(tmp_path / "e.yaml", BAGGAGE_CASE),
                         "--llm", "openai", "--base-url", server.url, "--json"))
    server = serve([Step("reflect", reflect_with(edit_reply("no-such-lesson", "delete", "")))])
    file = unanswered_rollouts(tmp_path / "rollouts.jsonl", BAGGAGE_CASE)
    shape("train-rollouts", driver("train-rollouts", file, "--llm", "openai", "--base-url",
                                   server.url, "--json"))


def test_every_json_command_has_a_row_and_a_check() -> None:
    """Each command with --json is in the docs/json-output.md table, and each row is checked: by a
    test above, or in the module ELSEWHERE names."""
    import click

    from expgit.cli.commands import REGISTRY

    with_json: set[str] = set()
    for entry in REGISTRY:
        command = entry.load()
        subcommands = (command.commands.items() if isinstance(command, click.Group)
                       else [("", command)])
        for sub, leaf in subcommands:
            if any(p.name == "as_json" for p in leaf.params):
                with_json.add(f"{entry.name} {sub}".strip())
    _, rows = documented()
    # a row per variant: "review PROPOSAL", "review GRADIENT", "list --stats"
    labels = {label.split()[0] if label.startswith("review")
                  or label in ("list --stats", "list --usage")
              else label for label in rows}
    assert with_json == labels
    here = Path(__file__).read_text()
    for label in rows:
        if label in ELSEWHERE:
            assert f'assert_shape("{label}"' in (ROOT / ELSEWHERE[label]).read_text(), label
        else:
            assert f'shape("{label}"' in here, label
