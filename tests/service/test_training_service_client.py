"""RemoteTrainingPolicyTrainer against a real training service on 127.0.0.1: end to end,
a mode mismatch, a wrong token, a service that dies mid-run and one that never answers."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from conftest import git
from training_service_support import (
    TOKEN,
    TOPICS,
    HeldChat,
    handles,
    start_service,
    topic_rollout,
    training_script,
)

from expgit.errors import ExpgitError, UsageError
from expgit.llm.scripted import ScriptedChatModel
from expgit.remote.training_client import RemoteTrainingPolicyTrainer
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext
from expgit.train.measurement.phase_metrics import apply_results_of


def test_remote_trainer_end_to_end(seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    main = seeded_repo.main_commit()
    chat = training_script()
    rollouts = [topic_rollout(t) for t in TOPICS]
    with start_service(path, handles(chat)) as server:
        trainer = RemoteTrainingPolicyTrainer(server.url, token=TOKEN, poll_interval=0.05)
        result = asyncio.run(trainer.train_rollouts(rollouts, seeded_repo.snapshot(),
                                                    PipelineContext(mode="propose")))
    chat.assert_done()
    assert result.errors == []
    assert [a.rollout for a in result.analyses] == rollouts  # in order, the caller's own
    for analysis in result.analyses:
        assert analysis.trajectory is not None
        assert analysis.trajectory.content == git(path, "show", analysis.trajectory.uri)
        assert (analysis.metadata.job_id or "").startswith("train_job_")
    assert sorted(g.target_experience_name for g in result.gradients) == sorted(
        f"{t}-feeding" for t in TOPICS)
    for gradient in result.gradients:
        git(path, "rev-parse", "--verify", f"refs/heads/expgit/gradients/{gradient.gradient_id}")
        assert gradient.after is not None and gradient.before is None
    assert result.plan is not None and len(result.plan.items) == 4
    (applied,) = apply_results_of(result)  # one batch
    assert applied.proposal_id is not None and applied.applied_commit is None
    git(path, "rev-parse", "--verify", f"refs/heads/expgit/proposals/{applied.proposal_id}")
    assert sorted(applied.written) == sorted(f"{t}-feeding" for t in TOPICS)
    assert seeded_repo.main_commit() == main
    # 1 health + 4 posts + at least one poll each
    assert trainer.stats.round_trips >= 9


def test_mode_mismatch_and_wrong_token(seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    chat = ScriptedChatModel([])
    before = git(path, "for-each-ref")
    with start_service(path, handles(chat)) as server:
        apply_run = RemoteTrainingPolicyTrainer(server.url, token=TOKEN)
        with pytest.raises(UsageError, match="runs in 'propose' mode"):
            asyncio.run(apply_run.train_rollouts([topic_rollout("yak")],
                                                 seeded_repo.snapshot(),
                                                 PipelineContext(mode="apply")))
        wrong = RemoteTrainingPolicyTrainer(server.url, token="nope", poll_interval=0.01)
        result = asyncio.run(wrong.train_rollouts([topic_rollout("yak")],
                                                  seeded_repo.snapshot(), PipelineContext()))
    assert len(result.errors) == 1
    assert "case yak-case: submitting" in result.errors[0]
    assert "HTTP 401: missing or wrong bearer token" in result.errors[0]
    assert result.gradients == [] and result.apply_result is None
    assert chat.calls == [] and git(path, "for-each-ref") == before


def test_service_dying_mid_run_is_a_clear_error(seeded_repo: ExperienceRepository) -> None:
    """The service stops while the rollout's analysis is held: the client reports the
    rollout failed (no answer) instead of waiting out its whole timeout."""
    path = seeded_repo.git.work_tree
    assert path is not None
    main = seeded_repo.main_commit()
    chat = HeldChat(training_script(("zebra",)))
    server = start_service(path, handles(chat), shutdown_grace_seconds=0.1)
    trainer = RemoteTrainingPolicyTrainer(server.url, token=TOKEN, poll_interval=0.05,
                                          max_poll_interval=0.2, max_unreachable=3,
                                          timeout=120)

    async def main_task() -> list[str]:
        run = asyncio.create_task(trainer.train_rollouts(
            [topic_rollout("zebra")], seeded_repo.snapshot(), PipelineContext()))
        await asyncio.to_thread(chat.waiting.wait, 30)
        await asyncio.to_thread(server.stop)  # the service goes away mid-rollout
        return (await run).errors

    errors = asyncio.run(main_task())
    assert len(errors) == 1
    assert errors[0].startswith("case zebra-case: training job train_job_")
    assert "no answer" in errors[0] or "stopped before this job finished" in errors[0]
    assert seeded_repo.main_commit() == main
    assert git(path, "for-each-ref", "refs/heads/expgit/proposals/") == ""


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    sock.close()


def test_service_that_never_answers(silent_server: str,
                                    seeded_repo: ExperienceRepository) -> None:
    trainer = RemoteTrainingPolicyTrainer(silent_server, request_timeout=0.2)
    with pytest.raises(ExpgitError, match=r"training service health check failed: .*no answer"):
        asyncio.run(trainer.train_rollouts([topic_rollout("yak")], seeded_repo.snapshot(),
                                           PipelineContext()))
    assert trainer.stats.round_trips == 1


def test_no_rollouts_no_request_and_no_analyses() -> None:
    trainer = RemoteTrainingPolicyTrainer("http://127.0.0.1:9")
    snapshot = None
    result = asyncio.run(trainer.train_rollouts([], snapshot, PipelineContext()))  # type: ignore[arg-type]
    assert result.errors == [] and trainer.stats.round_trips == 0
    with pytest.raises(UsageError, match="takes no analyses"):
        asyncio.run(trainer.train_rollouts([topic_rollout("yak")], snapshot,  # type: ignore[arg-type]
                                           PipelineContext(), analyses=[object()]))  # type: ignore[list-item]
