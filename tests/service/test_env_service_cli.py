"""``expgit train --env-url`` / ``expgit eval --env-url`` in-process against a real example
environment service on 127.0.0.1, and ``expgit env serve`` as its own process.

Two strict scripts: the environment's LLM answers only ``rollout`` calls, the trainer's
(an OpenAI-compatible server, ``--base-url``) only reflect/merge: so the
rollouts provably ran in the service and nothing else did."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import agent, cases_file
from conftest import ROOT, fsck, git, repo_state
from scripted_pipeline import (
    BAGGAGE_CASE,
    PETS_CASE,
    lesson_bodies,
    merge_of,
    reflect_for,
)

from expgit.asgi.server import RunningServer, start_server
from expgit.llm.factory import LLMRuntime
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.service.example_env import ExampleEnvironment, load_splits
from expgit.service.example_service import example_app
from expgit.store.format.settings import ServeSettings
from expgit.store.repository import ExperienceRepository


class Service:
    def __init__(self, server: RunningServer, chat: ScriptedChatModel) -> None:
        self.server, self.chat, self.url = server, chat, server.url


@pytest.fixture
def env_service(tmp_path: Path) -> Iterator[Any]:
    """Start an example environment service: splits train (baggage, pets) and eval
    (pets), its LLM scripted with ``rollouts`` rollout steps."""
    started: list[Any] = []

    def start(rollouts: int, *, token: str | None = None) -> Service:
        splits = load_splits([cases_file(tmp_path / "train.yaml", BAGGAGE_CASE, PETS_CASE),
                              cases_file(tmp_path / "eval.yaml", PETS_CASE)])
        chat = ScriptedChatModel([Step("rollout", agent) for _ in range(rollouts)])
        env = ExampleEnvironment(splits, LLMRuntime.fixed(chat),
                                 repositories=[tmp_path / "repo", tmp_path / "server.git"])
        server = start_server(example_app(env, token=token, serve=ServeSettings()))
        started.append(server)
        return Service(server, chat)

    yield start
    for server in started:
        server.stop()




def training_steps(repo: ExperienceRepository) -> list[Step]:
    bodies = lesson_bodies(repo)
    return [Step("reflect", reflect_for(bodies)), Step("reflect", reflect_for(bodies)),
            Step("merge", merge_of(bodies))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_train_propose_through_the_environment_service(
        run_cli: Any, env_service: Any, serve: Any, seeded_repo: ExperienceRepository,
        tmp_path: Path) -> None:
    path = tmp_path / "repo"
    main = seeded_repo.main_commit()
    snapshot_id = seeded_repo.snapshot().id
    # baseline 1, train 2, candidate 1; the final eval of the unchanged main is the
    # baseline's (no rollout in the service)
    service = env_service(rollouts=4)
    trainer = serve(training_steps(seeded_repo))
    result = run_cli("-C", path, "train", "--env-url", service.url, "--eval-split", "eval",
                     "--mode", "propose", "--llm", "openai", "--base-url", trainer.url,
                     "--json")
    assert result.code == 0, result.err
    service.chat.assert_done()
    trainer.chat.assert_done()
    assert trainer.unexpected == []
    data = json.loads(result.out)
    baseline, epoch, candidate, final = data["phases"]
    assert (baseline["cases"], epoch["cases"], final["cases"]) == (1, 2, 1)
    assert (final["reused"], final["rollouts"]) == ("baseline_eval", baseline["rollouts"])
    # the service ran the proposal's snapshot too (candidate eval), and it learnt pets
    assert (candidate["phase"], candidate["passed"]) == ("candidate_eval", 1)
    assert candidate["rollouts"][0]["policy_snapshot_id"] != snapshot_id
    assert (epoch["passed"], epoch["gradients"], epoch["commits"]) == (1, 2, 1)
    assert {r["case"] for r in epoch["rollouts"]} == {BAGGAGE_CASE.name, PETS_CASE.name}
    assert {r["policy_snapshot_id"] for p in (baseline, epoch, final)
            for r in p["rollouts"]} == {snapshot_id}
    # the trainer's LLM made no rollout call: only reflect and merge
    assert set(data["usage"]["by_stage"]) == {"reflect", "merge"}
    assert data["main_before"] == data["main_after"] == main
    assert git(path, "rev-parse", "main").strip() == main
    branches = git(path, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
    assert "expgit/trajectories" in branches
    assert len([b for b in branches if b.startswith("expgit/gradients/")]) == 2
    assert [b.rsplit("/", 1)[1] for b in branches if b.startswith("expgit/proposals/")] == \
        data["proposals"] and len(data["proposals"]) == 1
    fsck(path)


def test_eval_through_the_service_starts_no_model_and_writes_nothing(
        run_cli: Any, env_service: Any, seeded_repo: ExperienceRepository,
        tmp_path: Path) -> None:
    path = tmp_path / "repo"
    refs = git(path, "for-each-ref")
    service = env_service(rollouts=2)
    dead_llm = f"http://127.0.0.1:{free_port()}/v1"  # any model call here would fail
    result = run_cli("-C", path, "eval", "--env-url", service.url, "--split", "train",
                     "--llm", "openai", "--base-url", dead_llm)
    assert result.code == 0, result.err
    service.chat.assert_done()
    assert result.out.splitlines()[0] == ("[eval] epoch=0 cases=2 accuracy=50.00% "
                                          "passed=1/2 avg_reward=0.500000")
    assert git(path, "for-each-ref") == refs


def test_eval_through_the_service_on_a_bare_repository(
        run_cli: Any, env_service: Any, bare_repo: ExperienceRepository,
        tmp_path: Path) -> None:
    path = tmp_path / "server.git"
    refs = git(path, "for-each-ref")
    service = env_service(rollouts=1)
    result = run_cli("-C", path, "eval", "--env-url", service.url, "--json")
    assert result.code == 0, result.err
    service.chat.assert_done()
    [rollout] = json.loads(result.out)["phases"][0]["rollouts"]
    assert rollout["policy_snapshot_id"] == bare_repo.snapshot().id
    assert rollout["error"] is None
    assert git(path, "for-each-ref") == refs


def test_rollouts_failing_in_the_service_fail_the_eval_with_its_error(
        run_cli: Any, env_service: Any, seeded_repo: ExperienceRepository,
        tmp_path: Path) -> None:
    path = tmp_path / "repo"
    refs = git(path, "for-each-ref")
    service = env_service(rollouts=0)  # the service's model call is refused: it fails
    result = run_cli("-C", path, "eval", "--env-url", service.url)
    assert result.code == 1
    assert result.out.startswith("[eval] epoch=0 cases=1 accuracy=0.00% passed=0/1")
    assert "all 1 rollouts failed; first: case pet-in-cabin: " in result.err
    assert "unexpected LLM call #1 for stage 'rollout'" in result.err
    assert "check the environment service's model" in result.err
    assert git(path, "for-each-ref") == refs


@pytest.mark.parametrize("command", [
    ["train", "--eval-split", "eval", "--mode", "propose"], ["eval"]])
@pytest.mark.slow
def test_a_down_service_is_a_clear_error_before_any_model_and_nothing_is_written(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        command: list[str]) -> None:
    path = tmp_path / "repo"
    before = repo_state(path)
    trainer = serve([])
    url = f"http://127.0.0.1:{free_port()}"
    result = run_cli("-C", path, *command, "--env-url", url, "--llm", "openai",
                     "--base-url", trainer.url)
    assert result.code == 1
    assert f"service health check failed: GET {url}/health: no answer" in result.err
    assert "is the service running?" in result.err
    assert trainer.requests == 0
    assert repo_state(path) == before


def test_wrong_token_unknown_split_and_bad_flags(
        run_cli: Any, env_service: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "repo"
    before = repo_state(path)
    service = env_service(rollouts=0, token="s3cret")
    monkeypatch.setenv("ENV_TOKEN", "wrong")
    wrong = run_cli("-C", path, "eval", "--env-url", service.url, "--env-token-env",
                    "ENV_TOKEN")
    assert wrong.code == 1 and "HTTP 401: missing or wrong bearer token" in wrong.err
    monkeypatch.setenv("ENV_TOKEN", "s3cret")
    unknown = run_cli("-C", path, "eval", "--env-url", service.url, "--env-token-env",
                      "ENV_TOKEN", "--split", "test")
    assert unknown.code == 1
    assert "HTTP 404: unknown split 'test'; this service has 'train', 'eval'" in unknown.err
    unset = run_cli("-C", path, "eval", "--env-url", service.url, "--env-token-env", "NOPE")
    assert unset.code == 2 and "NOPE is not set" in unset.err
    cases = cases_file(tmp_path / "c.yaml", PETS_CASE)
    for args, message in [
            (["train", "--cases", cases, "--env-url", service.url], "not both"),
            (["train"], "--cases FILE or --env-url URL"),
            (["eval"], "--cases FILE or --env-url URL"),
            (["eval", "--cases", cases, "--split", "eval"], "--split needs --env-url"),
            (["train", "--cases", cases, "--eval-split", "eval"], "--eval-split needs"),
            (["train", "--cases", cases, "--dataset", "x"], "need --env-url")]:
        refused = run_cli("-C", path, *args)
        assert refused.code == 2 and message in refused.err, (args, refused.err)
    service.chat.assert_done()
    assert repo_state(path) == before


@pytest.mark.slow
def test_env_serve_command_serves_until_sigterm(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
        tmp_path: Path) -> None:
    """The real command in its own process: URL on stdout when ready, cases and
    rollouts over HTTP (its LLM: --base-url), a clean exit on SIGTERM."""
    env_llm = serve([Step("rollout", agent), Step("rollout", agent)])
    train = cases_file(tmp_path / "train.yaml", BAGGAGE_CASE, PETS_CASE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("EXPGIT_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "expgit", "env", "serve", "--split", f"dev={train}",
         "--port", "0", "--llm", "openai", "--base-url", env_llm.url,
         "--repo", str(tmp_path / "repo")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        health = httpx.get(f"{url}/health").json()
        assert health["metadata"]["splits"] == {"dev": 2}
        assert env_llm.url.removesuffix("/v1") in health["metadata"]["llm"]
        result = run_cli("-C", tmp_path / "repo", "eval", "--env-url", url, "--split", "dev")
        assert result.code == 0, result.err
        assert result.out.startswith("[eval] epoch=0 cases=2 accuracy=50.00% passed=1/2")
        env_llm.chat.assert_done()
        assert httpx.get(f"{url}/health").json()["metadata"]["llm_calls"] == {"rollout": 2}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "expgit: serving expgit-example/airline splits dev (2)" in err


def test_env_serve_refuses_bad_input_before_starting(run_cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases: [{name: a}]\n")
    cases: list[tuple[list[str | Path], int, str]] = [
            ([], 2, "nothing to serve"),
            (["--split", "nameless"], 2, "expected NAME=FILE"),
            (["--cases", bad], 5, "case 0 ('a'): rubric: Field required"),
            (["--cases", tmp_path / "none.yaml"], 5, "no such cases file")]
    for args, code, message in cases:
        result = run_cli("-C", tmp_path, "env", "serve", "--port", "0", "--llm", "openai",
                         "--base-url", "http://127.0.0.1:9/v1", *args)
        assert result.code == code and message in result.err, (args, result.err)
