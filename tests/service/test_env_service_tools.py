"""The example environment serving the airline tool environment on 127.0.0.1: its cases
come back bound, a rollout runs the tool-calling conversation in the service (state
check, tool parts), and a case bound to a database the service does not serve is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE
from json_value import dig, obj
from tool_support import acting, call

from expgit.asgi.server import RunningServer, start_server
from expgit.core.domain import ToolPart
from expgit.llm.factory import LLMRuntime
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.remote.case_loader import RemoteCaseLoader
from expgit.remote.rollout_executor import RemoteRolloutExecutor
from expgit.service.example_env import ExampleEnvironment, load_splits
from expgit.service.example_service import example_app
from expgit.store.format.settings import ServeSettings
from expgit.store.repository import ExperienceRepository
from expgit.train.context import ExecutionContext

AIRLINE_EVAL = EXAMPLE / "cases" / "airline_eval.yaml"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    agent = acting(lambda text: [call("cancel_reservation", reservation_id="XJ3LS9")]
                   if "cancel XJ3LS9" in text else [], answer="Cancelled, as you asked.")
    chat = ScriptedChatModel([Step("rollout", agent) for _ in range(3)])
    env = ExampleEnvironment(load_splits([AIRLINE_EVAL]), LLMRuntime.fixed(chat),
                             repositories=[tmp_path / "repo"])
    server: RunningServer = start_server(example_app(env, token=None, serve=ServeSettings()))
    yield server, chat
    server.stop()


def test_a_tool_case_runs_in_the_service(served: Any, seeded_repo: ExperienceRepository,
                                         tmp_path: Path) -> None:
    server, chat = served
    cases = asyncio.run(RemoteCaseLoader(server.url, split="airline_eval").load())
    assert len(cases) == 7 and cases[2].name == "eval-cancel-business"
    assert dig(cases[2].metadata, "environment", "name") == "airline"
    executor = RemoteRolloutExecutor(server.url, repo_uri=str(tmp_path / "repo"),
                                     poll_initial=0.01)
    [rollout] = asyncio.run(executor.execute([cases[2]], seeded_repo.snapshot(),
                                             ExecutionContext("s1")))
    assert rollout.error is None and rollout.evaluation is not None
    assert rollout.evaluation.passed, rollout.evaluation.feedback
    parts = [p for m in rollout.messages for p in m.parts if isinstance(p, ToolPart)]
    assert [(p.tool_name, p.tool_status) for p in parts] == [("cancel_reservation",
                                                              "completed")]
    assert dig(rollout.metadata, "final_state", "reservations", "XJ3LS9",
               "status") == "cancelled"
    assert len([c for c in chat.calls if c[0] == "rollout"]) == 3  # call, answer, answer


def test_a_database_the_service_does_not_serve_is_refused(
        served: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    server, chat = served
    [case] = asyncio.run(RemoteCaseLoader(server.url, split="airline_eval",
                                          filters={"name": "eval-transfer"}).load())
    obj(case.metadata, "environment")["database"] = "/etc/passwd"
    executor = RemoteRolloutExecutor(server.url, repo_uri=str(tmp_path / "repo"),
                                     poll_initial=0.01)
    [rollout] = asyncio.run(executor.execute([case], seeded_repo.snapshot(),
                                             ExecutionContext("s1")))
    assert rollout.error is not None and "does not serve" in rollout.error
    assert chat.calls == []
