"""ExampleEnvironment served by the SDK on 127.0.0.1, driven by the real remote clients:
its cases (pages, splits, filters, refusals) and its rollouts against the snapshot each
request names, with a strict scripted LLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import EXAMPLE, Driver, git
from json_value import number
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE

from expgit.asgi.server import RunningServer, start_server
from expgit.core.checks import RegexCheck
from expgit.core.domain import Rubric, RubricCriterion
from expgit.llm.factory import LLMRuntime
from expgit.llm.port import LLMError
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.remote.case_loader import RemoteCaseLoader
from expgit.remote.http import RemoteServiceError
from expgit.remote.rollout_executor import RemoteRolloutExecutor
from expgit.retrieval.usage import read_usage
from expgit.service.example_env import ExampleEnvironment, load_splits
from expgit.service.example_service import example_app
from expgit.store.format.settings import ServeSettings
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases
from expgit.train.context import ExecutionContext

TRAIN = EXAMPLE / "cases" / "train.yaml"
EVAL = EXAMPLE / "cases" / "eval.yaml"
PETS_EXPERIENCE = """---
name: pets-in-cabin
status: active
summary: Cats and small dogs may travel in the cabin in a carrier.
tags: [pets]
---
# Pets in the cabin

A cat or a small dog may travel in the cabin in a carrier under the seat.
"""


def knows_pets(messages: list[dict[str, str]]) -> str:
    """The scripted agent: right about pets only if the pets experience is shown."""
    if "pets-in-cabin" in messages[0]["content"]:
        return "Yes: your cat may travel in the cabin in a carrier."
    return "Sorry, I do not know."


class Served:
    def __init__(self, env: ExampleEnvironment, server: RunningServer,
                 chat: ScriptedChatModel) -> None:
        self.env, self.server, self.chat, self.url = env, server, chat, server.url


@pytest.fixture
def serve_env(tmp_path: Path) -> Iterator[Any]:
    """Start the service; rollouts may read ``tmp_path / "repo"`` (seeded_repo, driver)."""
    servers: list[RunningServer] = []

    def start(splits: dict[str, Any], steps: list[Step], *, token: str | None = None
              ) -> Served:
        chat = ScriptedChatModel(steps)
        env = ExampleEnvironment(splits, LLMRuntime.fixed(chat),
                                 repositories=[tmp_path / "repo"])
        server = start_server(example_app(env, token=token, serve=ServeSettings()))
        servers.append(server)
        return Served(env, server, chat)

    yield start
    for server in servers:
        server.stop()


def test_cases_are_paged_by_split_with_their_slice_metadata(serve_env: Any) -> None:
    served = serve_env(load_splits([TRAIN], {"test": EVAL}), [])
    expected = load_cases(TRAIN)
    loader = RemoteCaseLoader(served.url, split="train", limit=3)
    got = asyncio.run(loader.load())
    assert [c.name for c in got] == [c.name for c in expected] and len(expected) > 6
    assert got[0].input == expected[0].input and got[0].rubric == expected[0].rubric
    assert got[0].metadata == {"dataset": "expgit-example", "domain": "airline",
                               "split": "train"}
    test = asyncio.run(RemoteCaseLoader(served.url, dataset="expgit-example",
                                        domain="airline", split="test").load())
    assert [c.name for c in test] == [c.name for c in load_cases(EVAL)]
    signature = expected[0].task_signature
    filtered = asyncio.run(RemoteCaseLoader(served.url, split="train",
                                            filters={"task_signature": signature}).load())
    assert {c.task_signature for c in filtered} == {signature}
    assert 0 < len(filtered) < len(expected)
    health = httpx.get(f"{served.url}/health").json()
    assert health["service"] == "expgit-example-env"
    assert health["metadata"]["splits"] == {"train": len(expected), "test": len(test)}


@pytest.mark.parametrize("query, status, message", [
    ({"split": "nope"}, 404, "unknown split 'nope'; this service has 'train', 'test'"),
    ({"split": "train", "dataset": "tau2"}, 404, "unknown dataset 'tau2'"),
])
def test_bad_case_queries_are_refused_with_the_reason(serve_env: Any, query: dict[str, Any],
                                                      status: int, message: str) -> None:
    served = serve_env(load_splits([TRAIN], {"test": EVAL}), [])
    answer = httpx.post(f"{served.url}/v1/cases/query", json=query)
    assert answer.status_code == status and message in answer.json()["error"]
    with pytest.raises(RemoteServiceError, match=f"HTTP {status}"):
        asyncio.run(RemoteCaseLoader(served.url, **query).load())


def test_two_splits_of_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="split 'train' is given twice"):
        load_splits([TRAIN], {"train": EVAL})


def test_rollout_reads_the_snapshot_the_request_names(
        serve_env: Any, driver: Driver, seeded_repo: ExperienceRepository) -> None:
    """Same case, two commits of main: only the rollout at the newer one sees the new
    experience; the snapshot id comes back unchanged; the repository is not written."""
    before = seeded_repo.snapshot()
    driver.apply(driver.merge(driver.propose("pets-in-cabin", PETS_EXPERIENCE)))
    after = ExperienceRepository.open(driver.path).snapshot()
    assert after.commit != before.commit
    served = serve_env({"train": [PETS_CASE]}, [Step("rollout", knows_pets),
                                                Step("rollout", knows_pets)])
    refs = git(driver.path, "for-each-ref")
    executor = RemoteRolloutExecutor(served.url, repo_uri=str(driver.path),
                                     poll_initial=0.01)
    old, new = (asyncio.run(executor.execute([PETS_CASE], snapshot,
                                             ExecutionContext(f"snap:{snapshot.id}")))[0]
                for snapshot in (before, after))
    served.chat.assert_done()
    assert (old.error, new.error) == (None, None)
    assert old.policy_snapshot_id == f"snap:{before.id}"
    assert new.policy_snapshot_id == f"snap:{after.id}"
    assert old.evaluation is not None and not old.evaluation.passed
    assert new.evaluation is not None and new.evaluation.passed
    assert old.metadata["snapshot_commit"] == before.commit
    assert new.metadata["snapshot_commit"] == after.commit
    assert "pets-in-cabin" in [e.name for e in read_usage(new.metadata)]
    assert "pets-in-cabin" not in [e.name for e in read_usage(old.metadata)]
    assert [m.role for m in new.messages] == ["user", "assistant"]
    assert number(new.metadata, "remote", "round_trips") >= 2
    assert git(driver.path, "for-each-ref") == refs


@pytest.mark.parametrize("root_uri, commit, message", [
    (None, "0" * 40, "no commit '0000000000000000000000000000000000000000'"),
])
def test_a_snapshot_that_cannot_be_read_fails_the_execution_without_llm_calls(
        serve_env: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        root_uri: str | None, commit: str | None, message: str) -> None:
    served = serve_env({"train": [BAGGAGE_CASE]}, [])  # any LLM call is a script error
    snapshot = seeded_repo.snapshot()
    executor = RemoteRolloutExecutor(served.url, repo_uri=root_uri or str(tmp_path / "repo"),
                                     poll_initial=0.01)
    request = executor.request_for(BAGGAGE_CASE, snapshot, ExecutionContext("s1"))
    if commit is not None:
        request.policy_set.metadata["commit"] = commit
    submitted = httpx.post(f"{served.url}/v1/rollouts/execute",
                           json=request.model_dump(mode="json")).json()
    status = submitted
    while status["status"] in ("queued", "running"):
        status = httpx.get(f"{served.url}/v1/rollouts/executions/"
                           f"{submitted['execution_id']}").json()
    assert status["status"] == "failed" and message in status["error"]
    if commit is None:  # the client: a failed rollout for the case, never an exception
        [rollout] = asyncio.run(executor.execute([BAGGAGE_CASE], snapshot,
                                                 ExecutionContext("s1")))
        assert rollout.error is not None and message in rollout.error
        assert rollout.evaluation is not None and not rollout.evaluation.passed
    assert served.chat.calls == []


def test_a_failing_llm_call_is_a_completed_rollout_with_its_error(
        serve_env: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    def endpoint_down(messages: list[dict[str, str]]) -> str:
        raise LLMError("the model endpoint is down")

    served = serve_env({"train": [BAGGAGE_CASE]}, [Step("rollout", endpoint_down)])
    executor = RemoteRolloutExecutor(served.url, repo_uri=str(tmp_path / "repo"),
                                     poll_initial=0.01)
    [rollout] = asyncio.run(executor.execute([BAGGAGE_CASE], seeded_repo.snapshot(),
                                             ExecutionContext("s2")))
    served.chat.assert_done()
    assert rollout.policy_snapshot_id == "s2"
    assert rollout.error == "rollout failed: LLMError: the model endpoint is down"
    assert rollout.evaluation is not None and not rollout.evaluation.passed
    assert [m.role for m in rollout.messages] == ["user"]  # the prompt it was given


@pytest.mark.slow
def test_a_backtracking_rubric_does_not_hold_health(
        serve_env: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """A client's case whose regexes backtrack without end: the rubric is evaluated in a
    worker thread (each check runs out of its time and fails with the reason), and
    /health answers while it is (the execution is still running after it answered)."""
    slow = [RubricCriterion(name=f"slow-{i}", check=RegexCheck(pattern="(a|aa)+$"))
            for i in range(10)]
    case = PETS_CASE.model_copy(update={"rubric": Rubric(name="slow", criteria=slow)})
    served = serve_env({"train": [PETS_CASE]}, [Step("rollout", lambda _: "a" * 60 + "b")])
    executor = RemoteRolloutExecutor(served.url, repo_uri=str(tmp_path / "repo"),
                                     poll_initial=0.01)
    request = executor.request_for(case, seeded_repo.snapshot(), ExecutionContext("s3"))
    submitted = httpx.post(f"{served.url}/v1/rollouts/execute",
                           json=request.model_dump(mode="json")).json()
    status_url = f"{served.url}/v1/rollouts/executions/{submitted['execution_id']}"
    deadline = time.monotonic() + 60
    while not served.chat.calls:  # the answer is in: the rubric is being evaluated
        assert time.monotonic() < deadline, "the rollout never called the model"
        time.sleep(0.01)
    health = httpx.get(f"{served.url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["service"] == "expgit-example-env"
    assert httpx.get(status_url).json()["status"] == "running"
    status = submitted
    while status["status"] in ("queued", "running"):
        assert time.monotonic() < deadline + 120, "the rollout never finished"
        time.sleep(0.05)
        status = httpx.get(status_url).json()
    assert status["status"] == "completed", status
    evaluation = status["rollout"]["evaluation"]
    assert not evaluation["passed"] and len(evaluation["criterion_results"]) == 10
    assert all("timed out" in r["feedback"][0] for r in evaluation["criterion_results"])
