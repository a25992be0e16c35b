"""The training service over real HTTP on 127.0.0.1: rollouts posted concurrently and
trained into git (propose and apply), the guards, bad input with nothing written, the
queue limit, the same rollout in flight as one job, and the job registry's bounds."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import fsck, git, repo_state
from training_service_support import (
    JSON,
    TOPICS,
    HeldChat,
    auth,
    handles,
    start_service,
    topic_rollout,
    training_script,
    wait_finished,
)

from expgit.core.checks import RegexCheck
from expgit.core.domain import Message, Rubric, RubricCriterion
from expgit.llm.scripted import ScriptedChatModel
from expgit.service.jobs import JobRegistry, QueueFullError
from expgit.store.repository import ExperienceRepository


def post_all(url: str, bodies: list[str]) -> list[httpx.Response]:
    """Post every body at once (one asyncio.gather of real requests)."""
    async def main() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, headers=auth()) as client:
            return list(await asyncio.gather(*(
                client.post("/v1/train/rollouts", content=b,
                            headers={"Content-Type": "application/json"}) for b in bodies)))
    return asyncio.run(main())


def train_four(repo: ExperienceRepository, mode: str) -> tuple[list[dict[str, Any]], Any]:
    path = repo.git.work_tree
    assert path is not None
    chat = training_script()
    llm = handles(chat)
    with start_service(path, llm, mode=mode) as server:
        answers = post_all(server.url, [topic_rollout(t).model_dump_json() for t in TOPICS])
        assert [a.status_code for a in answers] == [202] * 4
        accepted = [a.json() for a in answers]
        assert all(a["status"] in ("queued", "running") and a["job_id"] for a in accepted)
        assert len({a["job_id"] for a in accepted}) == 4
        jobs = [wait_finished(server.url, a["job_id"]) for a in accepted]
    chat.assert_done()
    assert {s: u.calls for s, u in llm.meter.by_stage().items()} == {
        "reflect": 4, "merge": 1}
    return jobs, path


def test_propose_mode_trains_concurrent_rollouts_into_git(
        seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    jobs, path = train_four(seeded_repo, "propose")
    assert seeded_repo.main_commit() == main  # propose: main untouched
    assert [j["status"] for j in jobs] == ["completed"] * 4
    assert all(j["errors"] == [] for j in jobs)
    proposal_ids = {j["proposal_id"] for j in jobs}
    assert len(proposal_ids) == 1 and None not in proposal_ids  # one batch, one proposal
    (pid,) = proposal_ids
    assert {j["proposal_ref"] for j in jobs} == {f"refs/heads/expgit/proposals/{pid}"}
    assert all(j["applied_commit"] is None for j in jobs)
    changed = git(path, "diff", "--name-only", main, f"expgit/proposals/{pid}").split()
    assert changed == sorted(f"experiences/{t}-feeding.md" for t in TOPICS)
    for job, topic in zip(jobs, TOPICS, strict=True):
        assert job["case_name"] == f"{topic}-case"
        (gid,) = job["gradient_ids"]
        assert job["gradient_refs"] == [f"refs/heads/expgit/gradients/{gid}"]
        git(path, "rev-parse", "--verify", f"refs/heads/expgit/gradients/{gid}")
        result = job["result"]
        (gradient,) = result["gradients"]
        assert gradient["gradient_id"] == gid and gradient["before"] is None
        assert f"Feeding a {topic}" in gradient["after"]["content"]
        # the result is read from git: the trajectory is the stored document
        uri = job["trajectory_uri"]
        assert result["trajectory"]["uri"] == uri and uri.startswith("expgit/trajectories:")
        assert result["trajectory"]["content"] == git(path, "show", uri)
        assert gradient["evidence_trajectory_uris"] == [uri]
        assert result["evaluation"]["passed"] is False  # the rollout's own evaluation
        assert [i["gradient_ids"] for i in result["plan"]["items"]] == [[gid]]
        assert result["plan"]["items"][0]["after_content"] is None  # in the proposal
        assert result["apply_result"]["proposal_id"] == pid
    fsck(path)


def test_apply_mode_moves_main(seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    jobs, path = train_four(seeded_repo, "apply")
    new_main = seeded_repo.main_commit()
    assert new_main != main
    assert {j["applied_commit"] for j in jobs} == {new_main}
    assert all(j["status"] == "completed" for j in jobs)
    for topic in TOPICS:
        assert f"Feeding a {topic}" in git(path, "show", f"main:experiences/{topic}-feeding.md")
    for job in jobs:  # applied gradients moved out of the branch list, still in git
        (gid,) = job["gradient_ids"]
        assert job["gradient_refs"] == [f"refs/expgit/applied/gradients/{gid}"]
        git(path, "rev-parse", "--verify", job["gradient_refs"][0])
    fsck(path)


def test_guards_and_bad_input_write_nothing(seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    chat = ScriptedChatModel([])  # any LLM call would fail the test
    before = repo_state(path)
    with start_service(path, handles(chat), max_body_bytes=64 * 1024) as server:
        url = server.url
        health = httpx.get(f"{url}/health")  # open: no token needed
        assert health.status_code == 200
        assert health.json()["metadata"]["mode"] == "propose"
        body = topic_rollout("zebra").model_dump_json()
        for headers in ({}, auth("wrong"), {"Authorization": "Basic abc"}):
            refused = httpx.post(f"{url}/v1/train/rollouts", content=body, headers=headers)
            assert refused.status_code == 401
            assert refused.json() == {"error": "missing or wrong bearer token"}
        assert httpx.get(f"{url}/v1/train/jobs/x").status_code == 401
        big = json.dumps({"padding": "x" * 100_000})
        too_big = httpx.post(f"{url}/v1/train/rollouts", content=big, headers=auth() | JSON)
        assert too_big.status_code == 413 and "limit" in too_big.json()["error"]
        no_case = json.loads(body)
        del no_case["case"]
        blank = json.loads(body)
        blank["case"]["name"] = "  "
        bad_part = json.loads(body)
        bad_part["messages"][1]["parts"][1]["type"] = "tool-call"
        for bad, expected in (("{not json", "malformed JSON"),
                              (json.dumps(no_case), "case: Field required"),
                              (json.dumps(blank), "must include its case"),
                              (json.dumps(bad_part), "messages.1.parts.1"),
                              (json.dumps({**json.loads(body), "extra": 1}), "extra"),
                              ("[]", "invalid request")):
            answer = httpx.post(f"{url}/v1/train/rollouts", content=bad,
                                headers=auth() | JSON)
            assert answer.status_code == 422, (bad[:40], answer.text)
            assert expected in answer.json()["error"]
        missing = httpx.get(f"{url}/v1/train/jobs/train_job_nope", headers=auth())
        assert missing.status_code == 404 and "no training job" in missing.json()["error"]
        assert httpx.get(f"{url}/v1/nothing", headers=auth()).status_code == 404
    assert chat.calls == []
    assert repo_state(path) == before  # every ref and the object count unchanged


def test_queue_limit_and_same_rollout_in_flight(seeded_repo: ExperienceRepository) -> None:
    """Capacity 1 (max_concurrency 1, max_queue 0): a second rollout is refused (429)
    while the first is held; the same rollout again is the same job (200)."""
    path = seeded_repo.git.work_tree
    assert path is not None
    chat = HeldChat(training_script(("zebra",)))
    with start_service(path, handles(chat), batch=1, max_concurrency=1,
                       max_queue=0) as server:
        url = server.url
        zebra = topic_rollout("zebra").model_dump_json()
        first = httpx.post(f"{url}/v1/train/rollouts", content=zebra, headers=auth() | JSON)
        assert first.status_code == 202
        assert first.headers["Location"] == f"/v1/train/jobs/{first.json()['job_id']}"
        assert chat.waiting.wait(30)  # its analysis is held
        running = httpx.get(f"{url}/v1/train/jobs/{first.json()['job_id']}",
                            headers=auth()).json()
        assert running["status"] == "running" and running["result"] is None
        again = httpx.post(f"{url}/v1/train/rollouts", content=zebra, headers=auth() | JSON)
        assert again.status_code == 200 and again.json()["job_id"] == first.json()["job_id"]
        other = httpx.post(f"{url}/v1/train/rollouts",
                           content=topic_rollout("yak").model_dump_json(), headers=auth() | JSON)
        assert other.status_code == 429 and other.headers["Retry-After"] == "1"
        assert "limit" in other.json()["error"]
        health = httpx.get(f"{url}/health").json()
        assert health["metadata"]["jobs"]["running"] == 1
        chat.release.set()
        job = wait_finished(url, first.json()["job_id"])
        assert job["status"] == "completed" and len(job["gradient_ids"]) == 1
    chat.inner.assert_done()


def test_registry_bounds() -> None:
    registry = JobRegistry(capacity=2, keep_finished=1)
    a, created = registry.open("ka", "a")
    assert created and a.status == "queued"
    assert registry.open("ka", "a") == (a, False)
    b, _ = registry.open("kb", "b")
    with pytest.raises(QueueFullError):
        registry.open("kc", "c")
    registry.mark_running(a)
    registry.finish(a, None, ["case a: boom"])
    assert a.finished and a.errors == ["case a: boom"] and registry.counts()["failed"] == 1
    again, created = registry.open("ka", "a")  # a finished rollout may be trained again
    assert created and again is not a
    registry.finish(b, None, [])
    assert b.status == "completed"
    assert registry.get(a.job_id) is None and registry.get(b.job_id) is b  # keep 1


def test_unknown_repository_fails_before_serving(tmp_path: Path) -> None:
    from expgit.errors import ExpgitError
    from expgit.service.training_app import create_training_app

    with pytest.raises(ExpgitError):
        create_training_app(tmp_path / "nothing", handles(ScriptedChatModel([])))


def test_extra_routers_are_mounted_behind_the_guards(seeded_repo: ExperienceRepository
                                                     ) -> None:
    from fastapi import APIRouter

    from expgit.asgi.server import start_server
    from expgit.service.training_app import create_training_app

    router = APIRouter()

    @router.post("/v1/outcomes")
    async def outcomes() -> dict[str, str]:
        return {"ok": "yes"}

    path = seeded_repo.git.work_tree
    assert path is not None
    app = create_training_app(path, handles(ScriptedChatModel([])), token="tok",
                              routers=[router])
    with start_server(app) as server:
        assert httpx.post(f"{server.url}/v1/outcomes").status_code == 401
        answer = httpx.post(f"{server.url}/v1/outcomes", headers=auth("tok"))
        assert answer.status_code == 200 and answer.json() == {"ok": "yes"}


@pytest.mark.slow
def test_a_backtracking_rubric_does_not_hold_health(seeded_repo: ExperienceRepository
                                                    ) -> None:
    """A submitted rubric whose regexes backtrack without end: each check runs out of
    its time and fails with the reason, in a worker thread, so /health answers while the
    rubric is being evaluated (the model, called right after the evaluation, is not
    called yet)."""
    path = seeded_repo.git.work_tree
    assert path is not None
    chat = HeldChat(training_script(("zebra",)))
    slow = [RubricCriterion(name=f"slow-{i}", check=RegexCheck(pattern="(a|aa)+$"))
            for i in range(10)]
    rollout = topic_rollout("zebra")
    rollout = rollout.model_copy(update={
        "evaluation": None,
        "case": rollout.case.model_copy(update={"rubric": Rubric(name="slow", criteria=slow)}),
        "messages": [*rollout.messages[:-1], Message.text("assistant", "a" * 60 + "b")]})
    with start_service(path, handles(chat), batch=1, max_concurrency=1) as server:
        url = server.url
        posted = httpx.post(f"{url}/v1/train/rollouts", content=rollout.model_dump_json(),
                            headers=auth() | JSON)
        assert posted.status_code == 202, posted.text
        job_id = posted.json()["job_id"]
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/v1/train/jobs/{job_id}",
                        headers=auth()).json()["status"] != "running":
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.01)
        health = httpx.get(f"{url}/health", timeout=30)
        assert health.status_code == 200
        assert health.json()["metadata"]["jobs"]["running"] == 1
        assert not chat.waiting.is_set()  # the rubric was still being evaluated
        chat.release.set()
        job = wait_finished(url, job_id, limit_seconds=120)
    assert job["status"] == "completed", job
    results = job["result"]["evaluation"]["criterion_results"]
    assert len(results) == 10 and not any(r["passed"] for r in results)
    assert all("timed out" in r["feedback"][0] for r in results)
    chat.inner.assert_done()
