"""The service side of the remote protocol: guards, server runner and the environment SDK,
over real sockets on 127.0.0.1 (servers started by the tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from json_value import dig
from remote_toy_env import SNAPSHOT, ToyEnvironment, toy_case

from expgit.asgi.guards import install_guards
from expgit.asgi.server import RunningServer, start_server
from expgit.errors import ConflictError, InvalidInputError, NotFoundError, UsageError
from expgit.remote.protocol import (
    CasePage,
    ExecutionContextRef,
    ExecutionStatus,
    PolicySetRef,
    RolloutRequest,
)
from expgit.remote.sdk import create_environment_app, page_of

TOKEN = "s3cret-token"


def request_json(name: str = "toy-train-0", snapshot: str = "snap-1", padding: str = "") -> str:
    index = int(name.rsplit("-", 1)[1])
    return RolloutRequest(
        case=toy_case("train", index, padding=padding),
        policy_set=PolicySetRef(root_uri="/repo", metadata={"commit": SNAPSHOT.commit}),
        execution_context=ExecutionContextRef(policy_snapshot_id=snapshot),
    ).model_dump_json()


@pytest.fixture
def serve() -> Iterator[list[RunningServer]]:
    started: list[RunningServer] = []
    yield started
    for server in started:
        server.stop()


def run(serve: list[RunningServer], app: FastAPI) -> httpx.Client:
    server = start_server(app)
    serve.append(server)
    return httpx.Client(base_url=server.url, timeout=10)


def wait_for(client: httpx.Client, execution_id: str, headers: dict[str, str] | None = None
             ) -> ExecutionStatus:
    for _ in range(500):
        status = ExecutionStatus.model_validate(
            client.get(f"/v1/rollouts/executions/{execution_id}", headers=headers).json())
        if status.status in ("completed", "failed"):
            return status
        time.sleep(0.01)
    raise AssertionError(f"execution {execution_id} never finished")


def test_auth_is_required_except_for_health(serve: list[RunningServer]) -> None:
    client = run(serve, create_environment_app(ToyEnvironment(), token=TOKEN))
    assert client.get("/health").json()["service"] == "toy-env"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        answer = client.post("/v1/cases/query", json={}, headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert "bearer token" in answer.json()["error"]
    answer = client.get("/v1/rollouts/executions/x", headers={})
    assert answer.status_code == 401  # no information about executions either
    ok = client.post("/v1/cases/query", json={"split": "train"},
                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and len(ok.json()["cases"]) == 5


def test_body_over_the_limit_is_413_declared_or_streamed(serve: list[RunningServer]) -> None:
    client = run(serve, create_environment_app(ToyEnvironment(), max_body_bytes=2000))
    big = request_json(padding="x" * 3000)
    answer = client.post("/v1/rollouts/execute", content=big,
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    assert "2000 bytes" in answer.json()["error"]
    chunks = iter([big[:1500].encode(), big[1500:].encode()])  # chunked: no Content-Length
    streamed = client.post("/v1/rollouts/execute", content=chunks,
                           headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413
    small = client.post("/v1/rollouts/execute", content=request_json(),
                        headers={"Content-Type": "application/json"})
    assert small.status_code == 202


def test_bad_requests_get_one_line_4xx_errors(serve: list[RunningServer]) -> None:
    client = run(serve, create_environment_app(ToyEnvironment()))
    json_headers = {"Content-Type": "application/json"}
    malformed = client.post("/v1/rollouts/execute", content=b'{"case": ', headers=json_headers)
    assert malformed.status_code == 422
    assert malformed.json()["error"].startswith("invalid request: malformed JSON")
    typo = client.post("/v1/cases/query", json={"split": "train", "limt": 5})
    assert typo.status_code == 422 and "body.limt: Extra inputs" in typo.json()["error"]
    missing = client.post("/v1/rollouts/execute", json={"case": {"name": "x"}})
    assert missing.status_code == 422
    assert "body.policy_set: Field required" in missing.json()["error"]
    assert "\n" not in missing.json()["error"]
    text = client.post("/v1/cases/query", content=b"split=train",
                       headers={"Content-Type": "text/plain"})
    assert 400 <= text.status_code < 500 and text.json()["error"]
    unknown_split = client.post("/v1/cases/query", json={"split": "nope"})
    assert unknown_split.status_code == 404
    assert unknown_split.json() == {"error": "no split 'nope' in the toy environment"}
    assert client.get("/v1/nothing").status_code == 404
    assert client.get("/v1/rollouts/execute").status_code == 405


def test_unknown_execution_is_404(serve: list[RunningServer]) -> None:
    client = run(serve, create_environment_app(ToyEnvironment()))
    answer = client.get("/v1/rollouts/executions/rollout_exec_nope")
    assert answer.status_code == 404
    assert "no execution 'rollout_exec_nope'" in answer.json()["error"]


def test_cases_are_paged_with_an_opaque_offset_cursor(serve: list[RunningServer]) -> None:
    client = run(serve, create_environment_app(ToyEnvironment({"train": 7})))
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = CasePage.model_validate(client.post(
            "/v1/cases/query", json={"split": "train", "limit": 3, "cursor": cursor}).json())
        names += [c.name for c in page.cases]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3 and names == [f"toy-train-{i}" for i in range(7)]
    bad = client.post("/v1/cases/query", json={"split": "train", "cursor": "abc"})
    assert bad.status_code == 422 and "bad cursor 'abc'" in bad.json()["error"]
    assert page_of([], None, 5) == CasePage()
    with pytest.raises(InvalidInputError, match="bad cursor '-1'"):
        page_of([], "-1", 5)


def test_execution_lifecycle_completed_and_failed(serve: list[RunningServer]) -> None:
    env = ToyEnvironment(fail=["toy-train-1"], tamper=["toy-train-2"])
    client = run(serve, create_environment_app(env))
    accepted = client.post("/v1/rollouts/execute", content=request_json("toy-train-0"),
                           headers={"Content-Type": "application/json"})
    assert accepted.status_code == 202
    first = ExecutionStatus.model_validate(accepted.json())
    assert first.status in ("queued", "running") and first.case_name == "toy-train-0"
    done = wait_for(client, first.execution_id)
    assert done.status == "completed" and done.rollout is not None
    assert done.rollout.policy_snapshot_id == "snap-1"
    assert dig(done.rollout.metadata, "policy_set", "metadata") == {"commit": SNAPSHOT.commit}
    failing = client.post("/v1/rollouts/execute", content=request_json("toy-train-1"),
                          headers={"Content-Type": "application/json"}).json()
    failed = wait_for(client, failing["execution_id"])
    assert failed.status == "failed" and failed.rollout is None
    assert failed.error == "RuntimeError: toy failure for toy-train-1"
    tampering = client.post("/v1/rollouts/execute", content=request_json("toy-train-2"),
                            headers={"Content-Type": "application/json"}).json()
    tampered = wait_for(client, tampering["execution_id"])
    assert tampered.status == "failed"
    assert tampered.error is not None and "policy_snapshot_id 'tampered'" in tampered.error


def test_full_queue_is_429_and_slow_rollouts_time_out(serve: list[RunningServer]) -> None:
    env = ToyEnvironment({"train": 5}, hang=[f"toy-train-{i}" for i in range(5)])
    client = run(serve, create_environment_app(env, max_concurrency=1, max_queue=1,
                                               execution_timeout_seconds=0.3))
    headers = {"Content-Type": "application/json"}
    first = client.post("/v1/rollouts/execute", content=request_json("toy-train-0"),
                        headers=headers)
    second = client.post("/v1/rollouts/execute", content=request_json("toy-train-1"),
                         headers=headers)
    third = client.post("/v1/rollouts/execute", content=request_json("toy-train-2"),
                        headers=headers)
    assert (first.status_code, second.status_code, third.status_code) == (202, 202, 429)
    assert third.headers["retry-after"] == "1"
    assert "the service is full" in third.json()["error"]
    health = client.get("/health").json()["metadata"]
    assert health["max_concurrency"] == 1
    timed_out = wait_for(client, first.json()["execution_id"])
    assert timed_out.status == "failed"
    assert timed_out.error == "the rollout ran over the service's limit of 0.3s"
    assert env.max_running == 1


def test_long_poll_answers_when_finished_or_after_the_wait(serve: list[RunningServer]
                                                            ) -> None:
    env = ToyEnvironment({"train": 2}, delay=0.2, hang=["toy-train-0"])
    client = run(serve, create_environment_app(env, max_poll_wait_seconds=30))
    headers = {"Content-Type": "application/json"}
    hanging = client.post("/v1/rollouts/execute", content=request_json("toy-train-0"),
                          headers=headers).json()["execution_id"]
    held = client.get(f"/v1/rollouts/executions/{hanging}?wait=0.1")
    assert held.status_code == 200 and held.json()["status"] == "running"
    quick = client.post("/v1/rollouts/execute", content=request_json("toy-train-1"),
                        headers=headers).json()["execution_id"]
    done = client.get(f"/v1/rollouts/executions/{quick}?wait=30")
    assert done.json()["status"] == "completed"  # answered when it finished, in one poll
    negative = client.get(f"/v1/rollouts/executions/{quick}?wait=-1")
    assert negative.status_code == 422 and "query.wait" in negative.json()["error"]


def test_expgit_errors_map_to_statuses(serve: list[RunningServer]) -> None:
    app = FastAPI()
    install_guards(app, token=None, max_body_bytes=100)

    @app.get("/missing")
    async def missing() -> None:
        raise NotFoundError("no such proposal", hint="list them")

    @app.get("/conflict")
    async def conflict() -> None:
        raise ConflictError("main moved")

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("kaboom")

    client = run(serve, app)
    assert client.get("/missing").json() == {"error": "no such proposal (hint: list them)"}
    assert client.get("/missing").status_code == 404
    assert client.get("/conflict").status_code == 409
    crashed = client.get("/boom")
    assert crashed.status_code == 500
    assert crashed.json() == {"error": "internal error: RuntimeError: kaboom"}


def test_server_restarts_on_the_same_port() -> None:
    first = start_server(create_environment_app(ToyEnvironment()))
    port = first.port
    assert httpx.get(f"{first.url}/health").status_code == 200
    first.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{first.url}/health")
    with start_server(create_environment_app(ToyEnvironment()), port=port) as second:
        assert second.url == first.url
        assert httpx.get(f"{second.url}/health").json()["metadata"]["executions"] == {
            "queued": 0, "running": 0, "completed": 0, "failed": 0}


SERVE_SCRIPT = """
import signal, sys
from fastapi import FastAPI
from expgit.asgi.guards import install_guards
from expgit.asgi.server import serve_forever
app = FastAPI()
install_guards(app, token="t", max_body_bytes=100)
@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
serve_forever(app, host="127.0.0.1", port=0, on_ready=lambda url: print(url, flush=True))
print("stopped cleanly", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow
def test_serve_forever_reports_its_url_and_stops_cleanly_on_a_signal(signum: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SERVE_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        assert httpx.get(f"{url}/other").status_code == 401
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "stopped cleanly"


def test_a_port_in_use_is_a_clear_error() -> None:
    with start_server(FastAPI()) as server, \
            pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{server.port}"):
        start_server(FastAPI(), port=server.port)
