"""The training side of the remote protocol: RemoteCaseLoader, RemoteRolloutExecutor and
preflight against real environment services on 127.0.0.1 (and httpx.MockTransport for
services that misbehave in ways the SDK would not)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import TypedDict

import httpx
import pytest
from remote_toy_env import SNAPSHOT, ToyEnvironment, toy_case, toy_rollout

from expgit.asgi.server import RunningServer, start_server
from expgit.core.domain import Case, Rollout
from expgit.errors import ExpgitError
from expgit.remote.case_loader import RemoteCaseLoader
from expgit.remote.http import RemoteServiceError, preflight
from expgit.remote.protocol import RolloutRequest
from expgit.remote.rollout_executor import RemoteRolloutExecutor, RemoteRunNotes
from expgit.remote.sdk import create_environment_app
from expgit.train.context import ExecutionContext, PipelineContext
from expgit.train.groups import GroupSeat, group_cases

TOKEN = "tok-123"
CONTEXT = ExecutionContext("snap-abc", metadata={"phase": "train", "epoch": 0})
class Polling(TypedDict):
    poll_initial: float
    poll_max: float


FAST = Polling(poll_initial=0.01, poll_max=0.05)


@pytest.fixture
def servers() -> Iterator[list[RunningServer]]:
    started: list[RunningServer] = []
    yield started
    for server in started:
        server.stop()


def serve(servers: list[RunningServer], env: ToyEnvironment, **options: object
          ) -> RunningServer:
    server = start_server(create_environment_app(env, **options))  # type: ignore[arg-type]
    servers.append(server)
    return server


def remote_of(rollout: Rollout) -> RemoteRunNotes:
    notes = RemoteRunNotes.of(rollout)
    assert notes is not None, "not run remotely"
    return notes


def execute(executor: RemoteRolloutExecutor, cases: list[Case]) -> list[Rollout]:
    return asyncio.run(executor.execute(cases, SNAPSHOT, CONTEXT))


async def all_batches(loader: RemoteCaseLoader) -> list[list[Case]]:
    return [batch async for batch in loader.batches(PipelineContext())]


# ----------------------------------------------------------------------------- cases
def test_case_loader_follows_every_page(servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 23, "test": 4})
    server = serve(servers, env, token=TOKEN)
    loader = RemoteCaseLoader(server.url, dataset="toy", split="train", limit=5,
                              batch_size=10, token=TOKEN)
    batches = asyncio.run(all_batches(loader))
    assert [len(b) for b in batches] == [10, 10, 3]
    assert [c.name for b in batches for c in b] == [f"toy-train-{i}" for i in range(23)]
    assert env.queries == 5  # ceil(23 / 5) pages
    limited = RemoteCaseLoader(server.url, split="train", limit=5, max_cases=7, token=TOKEN)
    assert len(asyncio.run(limited.load())) == 7


def test_case_loader_errors_are_clear(servers: list[RunningServer]) -> None:
    server = serve(servers, ToyEnvironment(), token=TOKEN)
    with pytest.raises(RemoteServiceError, match="HTTP 401: missing or wrong bearer token"):
        asyncio.run(RemoteCaseLoader(server.url, split="train", token="wrong").load())
    with pytest.raises(RemoteServiceError, match="HTTP 404: no split 'nope'"):
        asyncio.run(RemoteCaseLoader(server.url, split="nope", token=TOKEN).load())


def mock_pages(pages: dict[str | None, dict[str, object]]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        cursor = json.loads(request.content)["cursor"]
        return httpx.Response(200, json=pages[cursor])
    return httpx.MockTransport(handler)


def test_case_loader_refuses_a_cursor_that_repeats() -> None:
    case = json.loads(toy_case("train", 0).model_dump_json())
    other = json.loads(toy_case("train", 1).model_dump_json())
    looping = mock_pages({None: {"cases": [case], "next_cursor": "a"},
                          "a": {"cases": [other], "next_cursor": "a"}})
    loader = RemoteCaseLoader("http://env.test", transport=looping)
    with pytest.raises(ExpgitError, match="next_cursor 'a' repeats"):
        asyncio.run(all_batches(loader))
    twice = mock_pages({None: {"cases": [case], "next_cursor": "b"},
                        "b": {"cases": [case], "next_cursor": None}})
    with pytest.raises(ExpgitError, match="'toy-train-0' returned twice"):
        asyncio.run(RemoteCaseLoader("http://env.test", transport=twice).load())
    empty = mock_pages({None: {"cases": [], "next_cursor": None}})
    with pytest.raises(ExpgitError, match="has no such cases"):
        asyncio.run(RemoteCaseLoader("http://env.test", transport=empty).load())


# -------------------------------------------------------------------------- preflight
def test_preflight_up_down_and_garbage(servers: list[RunningServer]) -> None:
    server = serve(servers, ToyEnvironment(), token=TOKEN)
    health = asyncio.run(preflight(server.url))  # /health needs no token
    assert health.service == "toy-env" and health.metadata["max_concurrency"] == 4
    server.stop()
    with pytest.raises(RemoteServiceError, match=r"health check failed.*no answer") as down:
        asyncio.run(preflight(server.url))
    assert down.value.hint is not None and "running" in down.value.hint
    html = httpx.MockTransport(lambda r: httpx.Response(200, text="<html>hello</html>"))
    with pytest.raises(RemoteServiceError, match="not JSON"):
        asyncio.run(preflight("http://env.test", transport=html))
    wrong = httpx.MockTransport(lambda r: httpx.Response(200, json={"status": "ok"}))
    with pytest.raises(RemoteServiceError, match="not a Health"):
        asyncio.run(preflight("http://env.test", transport=wrong))


# -------------------------------------------------------------------------- rollouts
def test_twenty_rollouts_in_flight_with_a_service_limit_of_four(
        servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 20}, delay=0.1)
    server = serve(servers, env, max_concurrency=4, token=TOKEN)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/srv/repo.git", token=TOKEN,
                                     max_in_flight=20, options={"max_iterations": 3}, **FAST)
    cases = env.splits["train"]
    rollouts = execute(executor, cases)
    assert [r.case.name for r in rollouts] == [c.name for c in cases]
    assert all(r.error is None and r.evaluation and r.evaluation.passed for r in rollouts)
    assert all(r.policy_snapshot_id == "snap-abc" for r in rollouts)
    assert env.max_running == 4 and len(env.finished) == 20
    sent = rollouts[0].metadata
    assert sent["policy_set"] == {"root_uri": "/srv/repo.git", "policies": [], "metadata": {
        "commit": SNAPSHOT.commit, "snapshot_id": SNAPSHOT.id, "experiences_root": "experiences"}}
    assert sent["execution_metadata"] == {"phase": "train", "epoch": 0}
    assert sent["options"] == {"max_iterations": 3}
    remote = remote_of(rollouts[0])
    assert remote.round_trips == 1 + remote.polls and remote.http_ms > 0
    assert len(remote.execution_ids) == 1 and remote.resubmitted is False


def test_a_groups_runs_reach_the_service_with_their_own_seeds(
        servers: list[RunningServer]) -> None:
    """[train] group_size: each run's case carries metadata.group_run (run, runs, seed,
    temperature), for the environment's own randomness; the rollouts come back in the
    order of the runs."""
    env = ToyEnvironment({"train": 2})
    server = serve(servers, env)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/repo", max_in_flight=4, **FAST)
    rollouts = execute(executor, group_cases(env.splits["train"], 3, 0.8))
    assert [r.case.name for r in rollouts] == ["toy-train-0"] * 3 + ["toy-train-1"] * 3
    runs = [GroupSeat.of(r.case) for r in rollouts]
    assert [(g.run, g.seed) for g in runs if g] == [(0, 1), (1, 2), (2, 3)] * 2
    assert all(g and g.runs == 3 and g.temperature == 0.8 for g in runs)
    assert all(r.case.metadata["split"] == "train" for r in rollouts)  # the case's own


@pytest.mark.slow
def test_failing_and_hanging_executions_become_failed_rollouts(
        servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 4}, fail=["toy-train-1"], hang=["toy-train-2"])
    server = serve(servers, env)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/repo", timeout_seconds=1, **FAST)
    ok0, failed, hung, ok3 = execute(executor, env.splits["train"])
    assert ok0.error is None and ok3.error is None
    assert failed.error == "RuntimeError: toy failure for toy-train-1"
    assert hung.error == "remote rollout timed out after 1s (last status: running)"
    for rollout in (failed, hung):
        assert rollout.evaluation is not None and not rollout.evaluation.passed
        assert rollout.evaluation.metadata == {"rollout_error": True}
        assert rollout.policy_snapshot_id == "snap-abc" and rollout.messages == []
        assert remote_of(rollout).round_trips >= 2


@pytest.mark.slow
def test_a_full_service_queue_is_waited_for(servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 3}, delay=0.2)
    server = serve(servers, env, max_concurrency=1, max_queue=0)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/repo", max_in_flight=3, **FAST)
    rollouts = execute(executor, env.splits["train"])
    assert all(r.error is None for r in rollouts) and env.max_running == 1
    assert sum(remote_of(r).round_trips for r in rollouts) > 3 + 3


def test_auth_and_size_limit_fail_each_case_cleanly(servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 2})
    server = serve(servers, env, token=TOKEN, max_body_bytes=3000)
    wrong = RemoteRolloutExecutor(server.url, repo_uri="/repo", token="nope", **FAST)
    refused = execute(wrong, env.splits["train"])
    assert all("HTTP 401: missing or wrong bearer token" in (r.error or "") for r in refused)
    big = toy_case("train", 0, padding="x" * 4000)
    right = RemoteRolloutExecutor(server.url, repo_uri="/repo", token=TOKEN, **FAST)
    too_big, fine = execute(right, [big, env.splits["train"][1]])
    assert too_big.error is not None and "HTTP 413" in too_big.error
    assert fine.error is None
    assert env.started == ["toy-train-1"]


def test_snapshot_id_echo_is_enforced_on_both_sides(servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 1}, tamper=["toy-train-0"])
    server = serve(servers, env)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/repo", **FAST)
    [by_sdk] = execute(executor, env.splits["train"])
    assert by_sdk.error is not None and "policy_snapshot_id 'tampered'" in by_sdk.error

    def rogue(request: httpx.Request) -> httpx.Response:  # a service without the SDK
        if request.method == "POST":
            sent = RolloutRequest.model_validate_json(request.content)
            return httpx.Response(200, json={
                "execution_id": "e1", "status": "completed", "case_name": "toy-train-0",
                "created_at": 1.0, "updated_at": 2.0,
                "rollout": json.loads(toy_rollout(sent, "other").model_dump_json())})
        raise AssertionError("no poll expected")

    client_side = RemoteRolloutExecutor("http://env.test", repo_uri="/repo",
                                        transport=httpx.MockTransport(rogue), **FAST)
    [by_client] = execute(client_side, env.splits["train"])
    assert by_client.error == ("the service changed policy_snapshot_id from 'snap-abc' to "
                               "'other'; the rollout cannot be attributed to a policy")
    assert by_client.policy_snapshot_id == "snap-abc"


@pytest.mark.slow
def test_a_restarted_service_gets_the_lost_executions_again(
        servers: list[RunningServer]) -> None:
    first_env = ToyEnvironment({"train": 6}, hang=[f"toy-train-{i}" for i in range(6)])
    first = serve(servers, first_env, max_concurrency=6)
    second_env = ToyEnvironment({"train": 6}, delay=0.05)
    executor = RemoteRolloutExecutor(first.url, repo_uri="/repo", poll_initial=0.02,
                                     poll_max=0.1, connect_retries=50, timeout_seconds=20)

    async def scenario() -> list[Rollout]:
        running = asyncio.create_task(
            executor.execute(first_env.splits["train"], SNAPSHOT, CONTEXT))
        while len(first_env.started) < 6:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(first.stop)  # dies mid-rollout
        servers.append(await asyncio.to_thread(
            start_server, create_environment_app(second_env), port=first.port))
        return await running

    rollouts = asyncio.run(scenario())
    assert first_env.finished == []
    assert all(r.error is None for r in rollouts)
    assert sorted(second_env.finished) == sorted(first_env.started)
    assert all(remote_of(r).resubmitted for r in rollouts)
    assert all(len(remote_of(r).execution_ids) == 2 for r in rollouts)


@pytest.mark.slow
def test_a_service_that_stays_down_fails_the_cases(servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 2}, hang=["toy-train-0", "toy-train-1"])
    server = serve(servers, env)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/repo", connect_retries=2, **FAST)

    async def scenario() -> list[Rollout]:
        running = asyncio.create_task(executor.execute(env.splits["train"], SNAPSHOT, CONTEXT))
        while len(env.started) < 2:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(server.stop)
        return await running

    for rollout in asyncio.run(scenario()):
        assert rollout.error is not None
        assert rollout.error.startswith("polling the execution failed: GET ")
        assert "no answer (ConnectError" in rollout.error
    nobody = RemoteRolloutExecutor(server.url, repo_uri="/repo", **FAST)
    [never] = execute(nobody, env.splits["train"][:1])
    assert never.error is not None and never.error.startswith("cannot submit the rollout")


def test_a_forgotten_execution_is_resubmitted_only_once() -> None:
    posts: list[str] = []

    def forgetful(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request.url.path)
            return httpx.Response(202, json={
                "execution_id": f"e{len(posts)}", "status": "running",
                "case_name": "toy-train-0", "created_at": 1.0, "updated_at": 1.0})
        return httpx.Response(404, json={"error": "no execution (the service restarted)"})

    executor = RemoteRolloutExecutor("http://env.test", repo_uri="/repo",
                                     transport=httpx.MockTransport(forgetful), **FAST)
    [rollout] = execute(executor, [toy_case("train", 0)])
    assert len(posts) == 2
    assert rollout.error is not None
    assert rollout.error.startswith("the service lost the execution twice")
    assert remote_of(rollout).execution_ids == ["e1", "e2"]


def test_long_polling_sees_a_finished_rollout_in_one_poll(servers: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 3}, delay=0.2)
    server = serve(servers, env, max_poll_wait_seconds=30)
    executor = RemoteRolloutExecutor(server.url, repo_uri="/repo", long_poll=10,
                                     poll_initial=5, poll_max=5)
    for rollout in execute(executor, env.splits["train"]):
        assert rollout.error is None
        assert remote_of(rollout).polls == 1
        assert remote_of(rollout).round_trips == 2


def test_a_service_without_long_polling_is_polled_with_backoff() -> None:
    asked: list[str] = []
    case = toy_case("train", 0)
    finished: dict[str, object] = {}

    def plain(request: httpx.Request) -> httpx.Response:  # answers at once, ignores ?wait=
        if request.method == "POST":
            sent = RolloutRequest.model_validate_json(request.content)
            finished["rollout"] = json.loads(toy_rollout(sent).model_dump_json())
        else:
            asked.append(str(request.url))
        done = len(asked) == 3
        return httpx.Response(200, json={
            "execution_id": "e1", "status": "completed" if done else "running",
            "case_name": case.name, "created_at": 1.0, "updated_at": 1.0,
            "rollout": finished["rollout"] if done else None})

    executor = RemoteRolloutExecutor("http://env.test", repo_uri="/repo", long_poll=1,
                                     transport=httpx.MockTransport(plain), **FAST)
    [rollout] = execute(executor, [case])
    assert rollout.error is None and remote_of(rollout).polls == 3
    assert asked == ["http://env.test/v1/rollouts/executions/e1?wait=1"] * 3
