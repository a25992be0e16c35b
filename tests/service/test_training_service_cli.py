"""``expgit serve`` as a user runs it: a separate process that prints its URL, serves the
training routes behind the token, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from training_service_support import topic_rollout

from expgit.store.repository import ExperienceRepository


def first_line(proc: subprocess.Popen[str], limit_seconds: float = 60) -> str:
    """The first stdout line of ``proc`` (fails the test if none comes)."""
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()),  # type: ignore[union-attr]
                              daemon=True)
    reader.start()
    reader.join(limit_seconds)
    assert lines and lines[0], "expgit serve printed no URL"
    return lines[0].strip()


@pytest.mark.slow
def test_serve_process_prints_url_guards_and_stops(seeded_repo: ExperienceRepository,
                                                   tmp_path: Path) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    env = {**os.environ, "TRAIN_TOKEN": "t0ken"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "expgit", "-C", str(path), "serve", "--port", "0",
         "--mode", "apply", "--token-env", "TRAIN_TOKEN", "--llm", "openai",
         "--base-url", "http://127.0.0.1:9/v1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = first_line(proc)
        assert url.startswith("http://127.0.0.1:")
        health = httpx.get(f"{url}/health").json()
        assert health["service"] == "expgit-training"
        assert health["metadata"]["mode"] == "apply"
        body = topic_rollout("yak").model_dump_json()
        assert httpx.post(f"{url}/v1/train/rollouts", content=body).status_code == 401
        missing = httpx.get(f"{url}/v1/train/jobs/none",
                            headers={"Authorization": "Bearer t0ken"})
        assert missing.status_code == 404
        # the outcomes routes are mounted on the same service, behind the same token
        auth = {"Authorization": "Bearer t0ken", "Idempotency-Key": "cli-serve-1"}
        outcome = {"target_kind": "experience", "target_id": "checked-baggage-allowance",
                   "verdict": "helpful", "score": 0.9, "source": "test"}
        assert httpx.post(f"{url}/v1/outcomes", json=outcome).status_code == 401
        created = httpx.post(f"{url}/v1/outcomes", json=outcome, headers=auth)
        assert created.status_code == 201, created.text
        assert created.json()["target_id"] == "checked-baggage-allowance"
        assert httpx.post(f"{url}/v1/outcomes", json=outcome, headers=auth).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "training service (apply mode" in err and "TRAIN_TOKEN" in err


def test_serve_refuses_an_unset_token_variable(run_cli: Any,
                                               seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    result = run_cli("-C", path, "serve", "--token-env", "NO_SUCH_VARIABLE_X", "--llm",
                     "openai", "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == 2
    assert "NO_SUCH_VARIABLE_X is not set" in result.err


def test_serve_help(run_cli: Any) -> None:
    result = run_cli("serve", "--help")
    assert result.code == 0
    assert "POST /v1/train/rollouts" in result.out and "--token-env" in result.out
