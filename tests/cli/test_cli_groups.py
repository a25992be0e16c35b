"""``expgit train --group-size K`` ([train] group_size) end to end over a local
OpenAI-compatible server: each run's seed goes over the wire, one group_reflect call per
group, the estimate counts the K rollouts and says it is an upper bound, the report and
the phase line carry the groups and pass^k; bad group sizes are one line and exit 2
(the flag) or 5 (expgit.toml), with nothing changed."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from cli_support import cases_file
from conftest import Driver, git, repo_state
from scripted_pipeline import merge_of

from expgit.core.checks import RegexCheck
from expgit.core.domain import Case, Rubric, RubricCriterion
from expgit.errors import EXIT_INVALID, EXIT_USAGE
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.runs.budget import train_plan
from expgit.store.repository import ExperienceRepository

CASE = Case(name="refund-destination", task_signature="refund-destination",
            input={"user_query": "My flight was cancelled. Where does my refund go?"},
            rubric=Rubric(name="refund", criteria=[RubricCriterion(
                name="names-destination",
                check=RegexCheck(pattern=r"orig\w* pay\w*"))]))
MERGED = ("# Refund destination\n\nWhen: a refund.\n\n"
          "1. Tell the user the refund goes back to the original payment method.\n")


GROUP_REPLY = json.dumps({
    "title": "Refund destination", "summary": "One run named it, one did not.",
    "difference": "the passing run named the original payment method",
    "key_steps": ["named it"], "mistakes": ["vague"], "lessons": ["Name where it goes."],
    "retrieval_anchor": "refund destination",
    "edits": [{"name": "refund-destination", "action": "create",
               "rationale": "The passing run named the destination.",
               "summary": "Say where a refund goes.", "tags": ["refund"],
               "body": "# Refund destination\n\n1. Name where it goes.\n",
               "confidence": 0.8}]})


def seeded(chat: ScriptedChatModel) -> Step:
    """The agent's answer drawn from its request's seed (the server records it)."""
    def answer(messages: list[dict[str, str]]) -> str:
        seed = chat.seeds[-1]
        good = seed is not None and random.Random(seed).random() < 0.5
        return "It goes to the original payment method." if good else "It will be processed."
    return Step("rollout", answer)


def test_train_in_groups_over_http(driver: Driver, serve: Any, tmp_path: Path) -> None:
    # seeds 1 and 2: the first run passes, the second fails (a group with a contrast)
    assert [random.Random(s).random() < 0.5 for s in (1, 2)] == [True, False]
    server = serve([])
    server.chat.steps += [seeded(server.chat), seeded(server.chat),
                          Step("group_reflect", GROUP_REPLY),
                          Step("merge", merge_of({"refund-destination": MERGED}))]
    report = tmp_path / "run.json"
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", CASE),
                    "--group-size", "2", "--concurrency", "1", "--llm", "openai",
                    "--base-url", server.url, "--report", report)
    assert result.code == 0, result.out + result.err
    server.chat.assert_done()
    assert server.chat.seeds == [1, 2, None, None]  # each run its seed, over the wire
    # 2 rollouts + at most 1 group call + 1 merge, said to be an upper bound
    err = result.err.splitlines()
    assert err[0].startswith("expgit: estimate: 4 LLM calls, ~"), result.err
    assert err[1] == ("expgit: estimate: groups of 2: an upper bound, counting one "
                      "group_reflect call per group; a group whose runs all got the same "
                      "evaluation makes none")
    data = json.loads(report.read_text())
    [epoch] = data["phases"]
    assert epoch["groups"] == {"size": 2, "groups": 1, "reflected": 1, "skipped": 0,
                               "errors": 0}
    assert epoch["summary"]["pass_k"] == {"1": 0.5, "2": 0.0}
    assert data["usage"]["by_stage"]["group_reflect"]["calls"] == 1
    line = next(x for x in result.out.splitlines() if x.startswith("[train_epoch]"))
    assert "group_size=2 groups=1 reflected=1 skipped=0 run_errors=0" in line
    assert "pass^1=0.500 pass^2=0.000" in line
    assert len(data["proposals"]) == 1


@pytest.mark.parametrize("size", ["0", "65", "-1"])
def test_a_group_size_out_of_range_is_one_line_and_exit_2(driver: Driver, tmp_path: Path,
                                                           size: str) -> None:
    before = repo_state(driver.path)
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", CASE),
                    "--group-size", size, "--llm", "openai",
                    "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == EXIT_USAGE, result.err
    assert len(result.err.strip().splitlines()) == 1 and "--group-size" in result.err
    assert repo_state(driver.path) == before


@pytest.mark.parametrize("size", ["0", "65"])
def test_a_group_size_out_of_range_in_expgit_toml_is_exit_5(driver: Driver, tmp_path: Path,
                                                            size: str) -> None:
    toml = driver.path / "expgit.toml"
    toml.write_text(toml.read_text() + f"\n[train]\ngroup_size = {size}\n")
    git(driver.path, "commit", "-q", "-am", "settings of the test")
    before = repo_state(driver.path)
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", CASE),
                    "--llm", "openai", "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == EXIT_INVALID, result.err
    assert len(result.err.strip().splitlines()) == 1 and "train.group_size" in result.err
    assert repo_state(driver.path) == before


def test_the_plan_counts_k_rollouts_and_one_call_per_group(
        seeded_repo: ExperienceRepository) -> None:
    """10 cases in groups of 4, one batch: 40 rollouts, at most 10 group calls (the
    upper bound), one merge for the 10 gradients; in groups of 1 as before."""
    cases = [CASE.model_copy(update={"name": f"c{i}"}) for i in range(10)]
    calls = {size: train_plan(seeded_repo, cases, None, epochs=1, batch_size=None,
                              measure=False, rollouts_here=True, group_size=size
                              ).calls(seeded_repo.settings.train.calls_for(False, size)).calls
             for size in (1, 4)}
    assert calls == {1: 10 + 10 + 1, 4: 40 + 10 + 1}
