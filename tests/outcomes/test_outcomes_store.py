"""OutcomeStore: append-only, idempotent records on the outcomes branch, targets checked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import fsck, git
from outcomes_support import Targets, make_targets

from expgit.errors import ConflictError, InvalidInputError, NotFoundError
from expgit.outcomes.records import OutcomeRequest, polarity
from expgit.outcomes.store import OutcomeStore
from expgit.store.repository import ExperienceRepository

BRANCH = "refs/heads/expgit/outcomes"


@pytest.fixture
def targets(seeded_repo: ExperienceRepository) -> Targets:
    return make_targets(seeded_repo)


def request(kind: str, target: str, verdict: str = "helpful", score: float = 1.0,
            **extra: str) -> OutcomeRequest:
    return OutcomeRequest.model_validate({"target_kind": kind, "target_id": target,
                                          "verdict": verdict, "score": score, **extra})


def test_add_every_kind_and_read_back(seeded_repo: ExperienceRepository,
                                      targets: Targets) -> None:
    store = OutcomeStore(seeded_repo)
    main_before = seeded_repo.main_commit()
    made = [
        store.add(request("rollout", targets.rollout, "pass"), "k-rollout"),
        store.add(request("trajectory", targets.rollout, "fail", 0.0), "k-traj-id"),
        store.add(request("trajectory", targets.trajectory_uri, "neutral", 0.5), "k-traj-uri"),
        store.add(request("experience", targets.experience, "harmful", 0.1,
                          reason="misled the agent", source="agent"), "k-exp"),
        store.add(request("proposal", targets.proposal[:6], "helpful", 0.9), "k-prop"),
    ]
    assert all(created for _, created in made)
    ids = [record.target_id for record, _ in made]
    # canonical ids: rollout id, trajectory URI (from an id or a URI), name, whole proposal id
    assert ids == [targets.rollout, targets.trajectory_uri, targets.trajectory_uri,
                   targets.experience, targets.proposal]
    stored = store.all()
    assert sorted(r.idempotency_key for r in stored) == sorted(
        ["k-rollout", "k-traj-id", "k-traj-uri", "k-exp", "k-prop"])
    exp = store.for_target("experience", targets.experience)
    assert [(r.verdict, r.score, r.reason, r.source) for r in exp] == [
        ("harmful", 0.1, "misled the agent", "agent")]
    assert exp[0].polarity == -1 and polarity("pass") == 1 and polarity("neutral") == 0
    assert len(store.for_target("trajectory", targets.rollout)) == 2  # by id or by URI
    assert store.for_target("proposal", targets.proposal[:6])[0].target_id == targets.proposal
    # main untouched; every record is a file on the outcomes branch, one commit each
    assert seeded_repo.main_commit() == main_before
    repo_dir = seeded_repo.git.common_dir.parent
    files = git(repo_dir, "ls-tree", "-r", "--name-only", BRANCH).split()
    assert len(files) == 5 and all(f.startswith("records/") and f.endswith(".json")
                                   for f in files)
    assert git(repo_dir, "rev-list", "--count", BRANCH).strip() == "5"
    assert git(repo_dir, "rev-list", "--max-parents=0", BRANCH).count("\n") == 1  # orphan
    assert "records/" not in git(repo_dir, "ls-tree", "-r", "--name-only", "main")
    fsck(repo_dir)


def test_idempotent_repeat_and_conflicting_reuse(seeded_repo: ExperienceRepository,
                                                 targets: Targets) -> None:
    store = OutcomeStore(seeded_repo)
    first, created = store.add(request("experience", targets.experience),
                               "same-key", now=datetime(2026, 1, 1, tzinfo=UTC))
    assert created
    tip = seeded_repo.git.ref(BRANCH)
    again, created_again = store.add(request("experience", targets.experience), "same-key")
    assert not created_again and again == first  # the first result, created_at included
    assert seeded_repo.git.ref(BRANCH) == tip  # nothing written
    with pytest.raises(ConflictError, match="different outcome"):
        store.add(request("experience", targets.experience, score=0.5), "same-key")
    assert seeded_repo.git.ref(BRANCH) == tip
    assert store.get("same-key") == first  # never rewritten
    with pytest.raises(InvalidInputError, match="idempotency key"):
        store.add(request("experience", targets.experience), "has space")


def test_missing_and_mismatched_targets(seeded_repo: ExperienceRepository,
                                        targets: Targets) -> None:
    store = OutcomeStore(seeded_repo)
    with pytest.raises(NotFoundError, match="no experience 'no-such-thing'"):
        store.add(request("experience", "no-such-thing"), "a")
    with pytest.raises(NotFoundError, match="no rollout"):
        store.add(request("rollout", "0123456789abcdef"), "b")
    with pytest.raises(NotFoundError, match="no proposal"):
        store.add(request("proposal", "ffffffffffff"), "c")
    with pytest.raises(NotFoundError, match="no trajectory"):
        store.add(request("trajectory", "main:experiences/x.md"), "d")
    # exists, but as another kind
    with pytest.raises(ConflictError, match="is an experience, not a proposal"):
        store.add(request("proposal", targets.experience), "e")
    with pytest.raises(ConflictError, match="is a proposal, not an experience"):
        store.add(request("experience", targets.proposal), "f")
    with pytest.raises(ConflictError, match="is a trajectory, not a rollout"):
        store.add(request("rollout", targets.trajectory_uri), "g")
    with pytest.raises(ConflictError, match="is a rollout, not an experience"):
        store.add(request("experience", targets.rollout), "h")
    assert seeded_repo.git.ref(BRANCH) is None  # nothing was written for any of them
    assert store.all() == []


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="score"):
        request("experience", "x", score=1.5)
    with pytest.raises(ValueError, match="verdict"):
        request("experience", "x", verdict="great")
    with pytest.raises(ValueError, match="target_kind"):
        request("model", "x")
    with pytest.raises(ValueError, match="extra"):
        OutcomeRequest.model_validate({"target_kind": "experience", "target_id": "x",
                                       "verdict": "pass", "score": 1, "typo": 1})


def test_bare_repository(bare_repo: ExperienceRepository) -> None:
    targets = make_targets(bare_repo)
    store = OutcomeStore(bare_repo)
    record, created = store.add(request("rollout", targets.rollout, "pass"), "bare-1")
    assert created and OutcomeStore(bare_repo).all() == [record]
