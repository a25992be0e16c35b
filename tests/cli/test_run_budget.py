"""Budgets: ``--max-calls`` / ``--max-cost`` (and ``[llm] max_calls`` / ``max_cost``)
stop a run cleanly, what it made is kept and the report says where it stopped; the run
prints its estimate first and warns when the budget cannot buy one merge; without a
price the cost is unknown, with one it is in ``[llm] currency``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from conftest import Driver, git, repo_state
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE, edit_reply, reflect_for

from expgit.errors import EXIT_INVALID, EXIT_RUN_ERRORS, EXIT_USAGE
from expgit.llm.budget import Budget
from expgit.llm.port import CallGuard, Completion, LLMError, Price, UsageMeter
from expgit.llm.scripted import Step
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository

GOLD_RULE = "- A gold member in economy has 3 free checked bags.\n"


def first_batch(repo: ExperienceRepository) -> list[Step]:
    """The baggage case alone (batch 1 of --batch-size 1): its rollout, reflection and
    merge, 3 calls and a proposal."""
    baggage = repo.snapshot().get("checked-baggage-allowance")
    assert baggage is not None
    body = baggage.experience.body + GOLD_RULE
    merge = json.dumps({"items": [edit_reply("checked-baggage-allowance", "upsert", body,
                                             gradient_ids=[])]})
    return [Step("rollout", agent),
            Step("reflect", reflect_for({"checked-baggage-allowance": body})),
            Step("merge", merge)]


def settings(driver: Driver, text: str) -> None:
    toml = driver.path / "expgit.toml"
    toml.write_text(toml.read_text() + text)
    git(driver.path, "commit", "-q", "-am", "settings of the test")


def test_max_calls_stops_a_train_run_and_keeps_the_proposal_made_before(
        driver: Driver, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    server = serve(first_batch(seeded_repo))  # batch 2 (pets) is never called
    report = tmp_path / "run.json"
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE,
                                                   PETS_CASE),
                    "--batch-size", "1", "--max-calls", "3", "--llm", "openai",
                    "--base-url", server.url, "--report", report)
    assert result.code == EXIT_RUN_ERRORS, result.out + result.err
    server.chat.assert_done()
    assert server.unexpected == []
    # the estimate first: 2 batches of 1 case, each 1 rollout + 1 reflect + 1 merge
    assert result.err.startswith("expgit: estimate: 6 LLM calls, ~"), result.err
    assert "cost unknown" in result.err.splitlines()[0]
    assert "warning" not in result.err  # 3 calls buy the first merge
    data = json.loads(report.read_text())
    assert data["estimate"]["calls"] == 6 and data["estimate"]["first_merge_calls"] == 3
    assert data["stopped"] == "budget: 3 calls reached (--max-calls 3)"
    assert "stopped early: budget: 3 calls reached (--max-calls 3)" in result.out
    assert "the run finished with errors" in result.err
    # the proposal of batch 1 is kept and listed; batch 2's rollout was never made
    [proposal] = data["proposals"]
    assert f"proposal: {proposal} (branch expgit/proposals/{proposal})" in result.out
    assert git(driver.path, "rev-parse", "--verify", f"expgit/proposals/{proposal}")
    [epoch] = data["phases"]
    failed = [r for r in epoch["rollouts"] if r["error"]]
    assert [r["case"] for r in failed] == [PETS_CASE.name]
    assert "not called: budget: 3 calls reached" in failed[0]["error"]
    assert data["problems"] == []  # the budget, not a broken model
    # no [llm.prices]: the cost is unknown, not 0
    assert data["usage"]["total"]["calls"] == 3 and data["usage"]["total"]["cost"] is None
    assert data["usage"]["currency"] is None
    total = next(line for line in result.out.splitlines() if line.startswith("total "))
    assert total.split()[1] == "3" and total.split()[-1] == "unknown"
    assert "0.000000" not in result.out


@pytest.mark.slow
def test_max_cost_with_prices_stops_the_run_and_prints_the_currency(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    # a token costs 1 EUR: the first call spends the budget, nothing else is called
    settings(driver, '\n[llm]\ncurrency = "EUR"\n[llm.prices."gpt-4o-mini"]\n'
             "prompt_per_million = 1000000.0\ncompletion_per_million = 1000000.0\n")
    server = serve([Step("rollout", agent)])
    report = tmp_path / "run.json"
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE,
                                                   PETS_CASE),
                    "--concurrency", "1", "--max-cost", "1", "--llm", "openai",
                    "--base-url", server.url, "--report", report)
    assert result.code == EXIT_RUN_ERRORS, result.out + result.err
    server.chat.assert_done()
    estimate = result.err.splitlines()[0]
    assert estimate.startswith("expgit: estimate: 5 LLM calls") and estimate.endswith(" EUR")
    assert result.err.splitlines()[1].startswith(
        "expgit: warning: --max-cost 1 cannot buy one merge: the first costs about ")
    data = json.loads(report.read_text())
    cost = data["usage"]["total"]["cost"]
    assert data["usage"]["total"]["calls"] == 1 and cost > 1
    assert data["usage"]["currency"] == "EUR" and data["estimate"]["currency"] == "EUR"
    assert data["stopped"] == f"budget: cost {cost:.6f} EUR reached (--max-cost 1)"
    assert data["estimate"]["warnings"] and data["proposals"] == []
    lines = result.out.splitlines()
    head = lines[lines.index("LLM usage:") + 1]
    assert head.split()[0] == "stage" and head.endswith("cost (EUR)")
    assert lines[-1].split()[-1] == f"{cost:.6f}"


@pytest.mark.slow
def test_the_warning_when_the_budget_cannot_buy_one_merge(
        driver: Driver, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """[llm] max_calls = 2: the batch's rollout and reflection, then its merge is refused."""
    settings(driver, "\n[llm]\nmax_calls = 2\n")
    server = serve(first_batch(seeded_repo)[:2])
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE),
                    "--llm", "openai", "--base-url", server.url, "--json")
    assert result.code == EXIT_RUN_ERRORS, result.out + result.err
    server.chat.assert_done()
    warning = ("expgit: warning: [llm] max_calls 2 cannot buy one merge: the first comes "
               "after about 3 calls (its rollouts and their training first)")
    assert result.err.splitlines()[1] == warning
    data = json.loads(result.out)
    assert data["estimate"]["warnings"] == [warning.removeprefix("expgit: warning: ")]
    assert data["stopped"] == "budget: 2 calls reached ([llm] max_calls 2)"
    assert data["proposals"] == [] and data["failures"][0]["stage"] == "merge"


@pytest.mark.parametrize("flag", [("--max-calls", "0"), ("--max-calls", "-3"),
                                  ("--max-cost", "0"), ("--max-cost", "-1")])
def test_a_budget_of_nothing_is_one_line_and_exit_2(driver: Driver, tmp_path: Path,
                                                    flag: tuple[str, str]) -> None:
    before = repo_state(driver.path)
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE),
                    *flag, "--llm", "openai", "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == EXIT_USAGE, result.err
    assert len(result.err.strip().splitlines()) == 1 and flag[0] in result.err
    assert repo_state(driver.path) == before


def test_a_budget_of_nothing_in_expgit_toml_is_invalid_input(driver: Driver,
                                                              tmp_path: Path) -> None:
    settings(driver, "\n[llm]\nmax_calls = 0\n")
    result = driver("eval", "--cases", cases_file(tmp_path / "e.yaml", BAGGAGE_CASE),
                    "--llm", "openai", "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == EXIT_INVALID, result.err
    assert len(result.err.strip().splitlines()) == 1 and "llm.max_calls" in result.err


def test_a_cost_budget_needs_a_price(driver: Driver, tmp_path: Path) -> None:
    before = repo_state(driver.path)
    result = driver("eval", "--cases", cases_file(tmp_path / "e.yaml", BAGGAGE_CASE),
                    "--max-cost", "0.5", "--llm", "openai", "--base-url",
                    "http://127.0.0.1:9/v1")
    assert result.code == EXIT_USAGE, result.err
    assert len(result.err.strip().splitlines()) == 1
    assert "--max-cost needs the price of the model 'gpt-4o-mini'" in result.err
    assert repo_state(driver.path) == before


class _Answers:
    model = "m-2024-07-18"  # a dated release, as endpoints name it

    async def complete(self, messages: Any, **kw: Any) -> Completion:
        return Completion(text="ok", prompt_tokens=10, completion_tokens=10, model=self.model)


def test_the_guard_counts_calls_let_through_and_cost_by_the_base_models_price() -> None:
    guard = CallGuard(budget=Budget(max_calls=3))
    meter = UsageMeter({"m": Price(prompt_per_million=1e5, completion_per_million=1e5)},
                       guard=guard)
    llm = StructuredLLM(_Answers(), meter)

    async def five() -> list[str]:
        out = []
        for _ in range(5):
            try:
                out.append(await llm.text("rollout", [{"role": "user", "content": "hi"}]))
            except LLMError as exc:
                out.append(exc.cause)
        return out

    assert asyncio.run(five()) == ["ok"] * 3 + [
        "not called: budget: 3 calls reached (--max-calls 3)"] * 2
    assert meter.total().calls == 3 and meter.total().cost == pytest.approx(3 * 20 * 0.1)
    unpriced = UsageMeter({})
    unpriced.record("rollout", Completion(text="x", prompt_tokens=1, model="other"))
    assert unpriced.total().cost is None  # unknown, not 0
