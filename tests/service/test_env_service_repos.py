"""``env serve`` reads only the repositories it was started for (``--repo``, default the
current one): a rollout request naming another path is refused with 403 before anything
is opened, over a real socket (issue 32, item 1)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import EXAMPLE
from scripted_pipeline import BAGGAGE_CASE

from expgit.asgi.server import start_server
from expgit.init import init_repository
from expgit.llm.factory import LLMRuntime
from expgit.llm.scripted import ScriptedChatModel
from expgit.remote.rollout_executor import RemoteRolloutExecutor
from expgit.service.example_env import ExampleEnvironment
from expgit.service.example_service import example_app
from expgit.store.format.settings import ServeSettings
from expgit.store.repository import ExperienceRepository
from expgit.train.context import ExecutionContext


def test_a_rollout_for_a_repository_not_served_is_refused_unopened(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init_repository(other, seed=EXAMPLE, layout="flat")
    (tmp_path / "link").symlink_to(other)
    chat = ScriptedChatModel([])  # any LLM call is a script error
    env = ExampleEnvironment({"train": [BAGGAGE_CASE]}, LLMRuntime.fixed(chat),
                             repositories=[tmp_path / "repo"])
    with start_server(example_app(env, token=None, serve=ServeSettings())) as server:
        for root_uri in (str(other), f"file://{other}", str(tmp_path / "link"),
                         str(tmp_path / "repo" / ".." / "other"), "/no/such/repository",
                         "relative/repo"):
            executor = RemoteRolloutExecutor(server.url, repo_uri=root_uri)
            request = executor.request_for(BAGGAGE_CASE, seeded_repo.snapshot(),
                                           ExecutionContext("s1"))
            answer = httpx.post(f"{server.url}/v1/rollouts/execute",
                                json=request.model_dump(mode="json"))
            assert answer.status_code == 403, (root_uri, answer.text)
            error = answer.json()["error"]
            assert "policy_set.root_uri" in error, error
            assert "does not serve" in error or "absolute path" in error, error
        executions = httpx.get(f"{server.url}/health").json()["metadata"]["executions"]
    assert not any(executions.values()), executions
    assert env._repositories == {} and chat.calls == []


def test_env_serve_refuses_a_repo_that_is_not_a_repository(run_cli: Any,
                                                           tmp_path: Path) -> None:
    cases = EXAMPLE / "cases" / "train.yaml"
    result = run_cli("-C", tmp_path, "env", "serve", "--port", "0", "--cases", cases,
                     "--llm", "openai", "--base-url", "http://127.0.0.1:9/v1",
                     "--repo", tmp_path / "nothing-here")
    assert result.code == 2, result.err
    assert "nothing-here" in result.err


@pytest.mark.parametrize("where", ["work tree", "git dir"])
def test_a_served_repository_is_found_by_either_path(
        seeded_repo: ExperienceRepository, tmp_path: Path, where: str) -> None:
    from expgit.cli.env import _served_paths

    served = _served_paths((tmp_path / "repo",), None)
    assert {os.path.realpath(p) for p in served} == {
        os.path.realpath(tmp_path / "repo"), os.path.realpath(tmp_path / "repo" / ".git")}
    path = tmp_path / "repo" if where == "work tree" else tmp_path / "repo" / ".git"
    env = ExampleEnvironment({"train": [BAGGAGE_CASE]}, LLMRuntime.fixed(
        ScriptedChatModel([])), repositories=served)
    executor = RemoteRolloutExecutor("http://unused", repo_uri=str(path))
    env.admit(executor.request_for(BAGGAGE_CASE, seeded_repo.snapshot(),
                                   ExecutionContext("s1")))
