"""POST/GET /v1/outcomes over a real server on 127.0.0.1: idempotency, 404, 409, 401."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import git
from fastapi import FastAPI
from outcomes_support import Targets, make_targets

from expgit.asgi.guards import install_guards
from expgit.asgi.server import start_server
from expgit.outcomes.api import outcomes_router
from expgit.outcomes.store import OutcomeStore
from expgit.service.training_app import create_training_app
from expgit.store.repository import ExperienceRepository

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def targets(seeded_repo: ExperienceRepository) -> Targets:
    return make_targets(seeded_repo)


@pytest.fixture
def client(seeded_repo: ExperienceRepository, targets: Targets) -> Iterator[httpx.Client]:
    app = FastAPI()
    install_guards(app, token=TOKEN, max_body_bytes=64 * 1024)
    app.include_router(outcomes_router(seeded_repo.git.common_dir.parent))
    with start_server(app, host="127.0.0.1", port=0) as server, \
            httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def body(kind: str, target: str, **extra: Any) -> dict[str, Any]:
    return {"target_kind": kind, "target_id": target, "verdict": "helpful", "score": 0.9,
            "reason": "cited the rule", "source": "reviewer", **extra}


def post(http: httpx.Client, payload: dict[str, Any], key: str | None) -> httpx.Response:
    headers = dict(AUTH) | ({"Idempotency-Key": key} if key is not None else {})
    return http.post("/v1/outcomes", json=payload, headers=headers)


def test_create_repeat_and_reuse(client: httpx.Client, targets: Targets,
                                 seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    first = post(client, body("experience", targets.experience), "key-1")
    assert first.status_code == 201, first.text
    record = first.json()
    assert record["target_kind"] == "experience" and record["target_id"] == targets.experience
    assert record["verdict"] == "helpful" and record["score"] == 0.9
    assert record["idempotency_key"] == "key-1"

    again = post(client, body("experience", targets.experience), "key-1")
    assert again.status_code == 200 and again.json() == record
    assert again.headers["Idempotent-Replayed"] == "true"

    reuse = post(client, body("experience", targets.experience, score=0.1), "key-1")
    assert reuse.status_code == 409
    assert "different outcome" in reuse.json()["error"]

    listed = client.get("/v1/outcomes", headers=AUTH,
                        params={"target_kind": "experience", "target_id": targets.experience})
    assert listed.status_code == 200 and listed.json() == {"outcomes": [record]}
    assert len(OutcomeStore(seeded_repo).all()) == 1
    assert seeded_repo.main_commit() == main
    repo_dir = seeded_repo.git.common_dir.parent
    assert "records/" not in git(repo_dir, "ls-tree", "-r", "--name-only", "main")


def test_every_kind_and_listing(client: httpx.Client, targets: Targets) -> None:
    for n, (kind, target) in enumerate([("rollout", targets.rollout),
                                        ("trajectory", targets.trajectory_uri),
                                        ("proposal", targets.proposal)]):
        response = post(client, body(kind, target, verdict="pass"), f"k{n}")
        assert response.status_code == 201, response.text
    everything = client.get("/v1/outcomes", headers=AUTH).json()["outcomes"]
    assert sorted(r["target_kind"] for r in everything) == ["proposal", "rollout",
                                                           "trajectory"]
    only = client.get("/v1/outcomes", headers=AUTH, params={"target_kind": "rollout"})
    assert [r["target_id"] for r in only.json()["outcomes"]] == [targets.rollout]
    needs_kind = client.get("/v1/outcomes", headers=AUTH, params={"target_id": "x"})
    assert needs_kind.status_code == 400 and "target_kind" in needs_kind.json()["error"]


def test_missing_target_is_404_and_wrong_kind_409(client: httpx.Client,
                                                  targets: Targets) -> None:
    missing = post(client, body("experience", "no-such-experience"), "k-404")
    assert missing.status_code == 404
    assert "no experience 'no-such-experience'" in missing.json()["error"]
    wrong = post(client, body("proposal", targets.experience), "k-409")
    assert wrong.status_code == 409
    assert "is an experience, not a proposal" in wrong.json()["error"]
    # a failed request stores nothing: its key is still free
    retry = post(client, body("experience", targets.experience), "k-404")
    assert retry.status_code == 201


def test_idempotency_key_required_and_checked(client: httpx.Client, targets: Targets,
                                              seeded_repo: ExperienceRepository) -> None:
    missing = post(client, body("experience", targets.experience), None)
    assert missing.status_code == 400
    assert "Idempotency-Key header is required" in missing.json()["error"]
    bad = post(client, body("experience", targets.experience), "two words")
    assert bad.status_code == 422 and "idempotency key" in bad.json()["error"]
    invalid = post(client, body("experience", targets.experience, score=2), "k")
    assert invalid.status_code == 422 and "score" in invalid.json()["error"]
    assert OutcomeStore(seeded_repo).all() == []


def test_auth_required(client: httpx.Client, targets: Targets,
                       seeded_repo: ExperienceRepository) -> None:
    no_token = client.post("/v1/outcomes", json=body("experience", targets.experience),
                           headers={"Idempotency-Key": "k"})
    assert no_token.status_code == 401
    assert no_token.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/v1/outcomes", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert OutcomeStore(seeded_repo).all() == []


def test_bare_repository(bare_repo: ExperienceRepository, tmp_path: Path) -> None:
    targets = make_targets(bare_repo)
    app = FastAPI()
    install_guards(app, token=None, max_body_bytes=64 * 1024)
    app.include_router(outcomes_router(tmp_path / "server.git"))
    with start_server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        response = http.post("/v1/outcomes", json=body("rollout", targets.rollout),
                             headers={"Idempotency-Key": "bare"})
        assert response.status_code == 201, response.text
    assert [r.target_id for r in OutcomeStore(bare_repo).all()] == [targets.rollout]


def test_concurrent_posts(client: httpx.Client, targets: Targets,
                          seeded_repo: ExperienceRepository) -> None:
    payload = body("experience", targets.experience)
    keys = ["same"] * 6 + [f"distinct-{n}" for n in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(lambda key: post(client, payload, key), keys))
    same = [r for r, key in zip(responses, keys, strict=True) if key == "same"]
    assert sorted(r.status_code for r in same) == [200] * 5 + [201]
    assert len({r.json()["id"] for r in same}) == 1
    assert all(r.status_code == 201 for r in responses[6:])
    assert len(OutcomeStore(seeded_repo).all()) == 7
    repo_dir = seeded_repo.git.common_dir.parent
    assert git(repo_dir, "rev-list", "--count", "expgit/outcomes").strip() == "7"


class _IdleTrainer:
    """Stands in for the streaming trainer: the outcome routes never use it."""

    analyzer = None

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


def test_mounted_in_the_training_app(seeded_repo: ExperienceRepository,
                                     targets: Targets) -> None:
    path = seeded_repo.git.common_dir.parent
    app = create_training_app(path, token=TOKEN, routers=[outcomes_router(path)],
                              trainer_factory=lambda repo, llm, gate: _IdleTrainer())  # type: ignore[arg-type,return-value]
    with start_server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        assert post(http, body("experience", targets.experience), "app-1").status_code == 201
        unauthorized = http.post("/v1/outcomes", json=body("experience", targets.experience),
                                 headers={"Idempotency-Key": "app-2"})
        assert unauthorized.status_code == 401
        health = http.get("/health")
        assert health.status_code == 200 and "outcome" not in health.text
    assert [r.idempotency_key for r in OutcomeStore(seeded_repo).all()] == ["app-1"]
