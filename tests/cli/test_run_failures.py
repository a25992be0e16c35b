"""A run's failures say why, and its exit code shows them: failed LLM calls counted by
stage and cause, a run with errors exits 7 (what it made is kept), a dead endpoint is
found before the first rollout, and a run stops calling an endpoint that stopped
answering."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from conftest import Driver, repo_state
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE, analyze

from expgit.errors import EXIT_RUN_ERRORS
from expgit.llm.port import CallGuard, Completion, LLMError, UsageMeter
from expgit.llm.scripted import Step
from expgit.llm.structured import StructuredLLM


def test_truncated_replies_are_counted_by_cause_and_the_run_exits_7(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    cut = analyze([{"role": "user", "content": "bags"}])[:-1] + ', "edits": [{"name": "pets'
    server = serve([Step("rollout", agent), Step("rollout", agent),
                    Step("reflect", cut, finish_reason="length"),
                    Step("reflect", cut, finish_reason="length")])
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE,
                                                   PETS_CASE),
                    "--llm", "openai", "--base-url", server.url, "--report",
                    tmp_path / "run.json")
    assert result.code == EXIT_RUN_ERRORS, result.out + result.err
    assert "2 reflect calls: reply cut off at 2048 tokens (finish_reason=length)" in result.out
    assert "the run finished with errors: 2 reflect calls: reply cut off" in result.err
    report = json.loads((tmp_path / "run.json").read_text())
    assert report["failures"] == [{"stage": "reflect", "count": 2, "cause":
                                   "reply cut off at 2048 tokens (finish_reason=length)"}]
    assert report["stopped"] is None  # the endpoint answered: no reason to stop
    server.chat.assert_done()


def test_a_dead_endpoint_is_found_before_the_first_rollout(driver: Driver,
                                                           tmp_path: Path) -> None:
    before = repo_state(driver.path)
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE),
                    "--llm", "openai", "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == 1, result.err
    assert "does not answer (checked before the first rollout)" in result.err
    assert len(result.err.strip().splitlines()) <= 2
    assert repo_state(driver.path) == before  # no trajectory, nothing written


class _Dead:
    """An endpoint that stopped answering: every call fails as the transport would."""

    model = "dead"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: Any, **kw: Any) -> Completion:
        self.calls += 1
        raise LLMError("rollout (dead): connection refused", cause="127.0.0.1 unreachable")


def test_the_run_stops_calling_an_endpoint_that_stopped_answering() -> None:
    dead = _Dead()
    meter = UsageMeter(guard=CallGuard(max_failures=3))
    llm = StructuredLLM(dead, meter)

    async def ten_calls() -> list[str]:
        causes = []
        for _ in range(10):
            try:
                await llm.text("rollout", [{"role": "user", "content": "hi"}])
            except LLMError as exc:
                causes.append(exc.cause)
        return causes

    causes = asyncio.run(ten_calls())
    assert dead.calls == 3  # then no request at all
    assert causes[:3] == ["127.0.0.1 unreachable"] * 3
    assert all(c.startswith("not called: the endpoint stopped answering (3 calls in a row")
               for c in causes[3:])
    assert [(f.stage, f.count) for f in meter.failures()] == [("rollout", 7), ("rollout", 3)]
    assert meter.guard is not None and meter.guard.stopped is not None


def test_an_answer_resets_the_count_and_the_deadline_stops_the_calls() -> None:
    guard = CallGuard(max_failures=2)
    guard.failed(LLMError("x", cause="timed out"))
    guard.succeeded()
    guard.failed(LLMError("x", cause="timed out"))
    guard.check("estimate")  # not two in a row: still calling
    late = CallGuard(deadline_seconds=0.0)
    with pytest.raises(LLMError, match="per-run deadline of 0s passed"):
        late.check("estimate")
