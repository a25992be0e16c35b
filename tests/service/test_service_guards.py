"""What a web page cannot do to the HTTP services (issue 32, item 4), over real sockets on
127.0.0.1: a cross-site (text/plain, form or untyped) POST is 415 and changes nothing, a
Host header other than the allowed names is 400 (DNS rebinding), and a client that
stalls mid-headers or mid-body is disconnected while ``/health`` keeps answering."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import EXAMPLE
from training_service_support import (
    JSON,
    handles,
    start_service,
    topic_rollout,
    training_script,
)

from expgit.asgi.guards import ClientTimeouts, host_name
from expgit.asgi.server import RunningServer, start_server
from expgit.llm.factory import LLMRuntime
from expgit.llm.scripted import ScriptedChatModel
from expgit.service.example_env import ExampleEnvironment, load_splits
from expgit.service.example_service import example_app
from expgit.store.format.settings import ServeSettings
from expgit.store.repository import ExperienceRepository

CROSS_SITE = [{"Content-Type": "text/plain;charset=UTF-8"},
              {"Content-Type": "application/x-www-form-urlencoded"},
              {"Content-Type": "multipart/form-data; boundary=x"},
              {}]  # a fetch() of an untyped Blob sends no Content-Type at all
FAST = ClientTimeouts(header_seconds=0.5, body_seconds=0.5)
WAIT = 30.0  # generous bound on any wait below; the tests do not time anything


@pytest.fixture
def env_server(tmp_path: Path) -> Iterator[RunningServer]:
    env = ExampleEnvironment(load_splits([EXAMPLE / "cases" / "train.yaml"]),
                             LLMRuntime.fixed(ScriptedChatModel([])),
                             repositories=[tmp_path / "repo"])
    with start_server(example_app(env, token=None, serve=ServeSettings()),
                      allow_hosts=["trainer.internal"], timeouts=FAST) as server:
        yield server


@pytest.mark.parametrize("headers", CROSS_SITE, ids=["text", "form", "multipart", "none"])
@pytest.mark.slow
def test_a_cross_site_post_cannot_move_main(seeded_repo: ExperienceRepository,
                                            headers: dict[str, str]) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    before = seeded_repo.main_commit()
    chat = training_script(("zebra",))
    with start_service(path, handles(chat), mode="apply", token=None, batch=1) as server:
        answer = httpx.post(f"{server.url}/v1/train/rollouts", headers=headers,
                            content=topic_rollout("zebra").model_dump_json())
        assert answer.status_code == 415, answer.text
        assert "application/json" in answer.json()["error"]
        jobs = httpx.get(f"{server.url}/health").json()["metadata"]["jobs"]
    assert not any(jobs.values()) and chat.calls == []
    assert seeded_repo.main_commit() == before


def test_a_cross_site_post_to_the_environment_service_is_refused(
        env_server: RunningServer) -> None:
    for headers in CROSS_SITE:
        answer = httpx.post(f"{env_server.url}/v1/cases/query", headers=headers,
                            content=b'{"split": "train"}')
        assert answer.status_code == 415, (headers, answer.text)
    typed = httpx.post(f"{env_server.url}/v1/cases/query", headers=JSON,
                       content=b'{"split": "train"}')
    assert typed.status_code == 200 and typed.json()["cases"]


def test_only_allowed_host_names_are_answered(env_server: RunningServer) -> None:
    port = env_server.port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example",
                 "localhost.evil.example", ""):
        answer = httpx.get(f"{env_server.url}/health", headers={"Host": host})
        assert answer.status_code == 400, (host, answer.text)
        assert "not allowed" in answer.json()["error"]
        query = httpx.post(f"{env_server.url}/v1/cases/query", headers={"Host": host, **JSON},
                           content=b'{"split": "train"}')
        assert query.status_code == 400
    for host in ("localhost", f"LOCALHOST:{port}", f"127.0.0.1:{port}", "[::1]:8080",
                 "trainer.internal", "trainer.internal:443"):
        answer = httpx.get(f"{env_server.url}/health", headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)


def test_host_names_compare_without_port_or_case() -> None:
    assert host_name("LocalHost:80") == "localhost"
    assert host_name("[::1]:8765") == host_name("::1") == "[::1]"
    assert host_name("example.com.") == "example.com"


def connect(server: RunningServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Reads until the server closes the connection (True), or WAIT passes (False)."""
    try:
        while True:
            if sock.recv(4096) == b"":
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.close()


@pytest.mark.parametrize("sent", [
    b"",  # connects and says nothing
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # half a header, then stalls
    b"POST /v1/cases/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
    b"\r\nContent-Length: 100\r\n\r\n{\"split\": ",  # part of the body, then stalls
], ids=["silent", "slow-headers", "slow-body"])
@pytest.mark.slow
def test_a_stalled_client_is_disconnected(env_server: RunningServer, sent: bytes) -> None:
    sock = connect(env_server)
    sock.sendall(sent)
    health = httpx.get(f"{env_server.url}/health", timeout=WAIT)  # others are served
    assert health.status_code == 200
    assert closed_by_server(sock)
    assert httpx.get(f"{env_server.url}/health", timeout=WAIT).status_code == 200


def test_a_prompt_client_keeps_its_connection(env_server: Any) -> None:
    """Keep-alive requests on one connection still work: the deadlines are per request."""
    with httpx.Client(base_url=env_server.url, timeout=WAIT) as client:
        for _ in range(3):
            assert client.post("/v1/cases/query", json={"split": "train"}).status_code == 200
            assert client.get("/health").status_code == 200
