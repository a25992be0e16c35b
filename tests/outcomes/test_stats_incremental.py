"""experience_stats kept incrementally in the derived index: a new trajectories tip folds
only the trajectories changed since the last one folded (a tree diff), and its answer is
always the roll-up of everything on the branch; a removed or changed trajectory, or a new
outcome, is seen."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from expgit.outcomes.records import OutcomeRequest
from expgit.outcomes.stats import (
    _Cache,
    experience_stats,
    roll_up,
    trajectory_row,
)
from expgit.outcomes.store import OutcomeStore
from expgit.store.derived.cache import index_file
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import TrajectoryStore


def document(tid: str, used: list[str], passed: bool, score: float) -> str:
    names = "".join(f"  - name: {n}\n" for n in used)
    return (f"---\nname: {tid}\nkind: trajectory\nexperiences_used:\n{names}"
            f"evaluation:\n  passed: {str(passed).lower()}\n  score: {score}\n"
            f"analyzed_at: '2025-01-0{1 + int(tid[-1], 16) % 9}T00:00:00+00:00'\n---\n\n"
            f"# Trajectory {tid}\n")


def from_scratch(repo: ExperienceRepository) -> dict[str, object]:
    """The roll-up of every trajectory and outcome on the branches, read whole."""
    store = TrajectoryStore(repo)
    rows = [row for tid in store.ids()
            if (row := trajectory_row(tid, store.find(tid) or "")) is not None]
    tip = OutcomeStore(repo).branch.tip()
    return dict(roll_up(rows, OutcomeStore(repo).all() if tip else []))


def uses(repo: ExperienceRepository) -> list[tuple[str, str]]:
    """The (trajectory file, blob) of the index's rows."""
    with closing(sqlite3.connect(index_file(repo.git.common_dir))) as db:
        return db.execute("SELECT DISTINCT name, blob FROM trajectory_uses").fetchall()


def test_incremental_stats_equal_the_full_roll_up(seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(repo := seeded_repo)
    assert experience_stats(repo) == {}
    documents = {f"{i:016x}": document(f"{i:016x}", ["a", "b"] if i % 2 else ["b", "c"],
                                       i % 3 != 0, i / 10) for i in range(1, 13)}
    for tid, text in documents.items():
        store.store(tid, text, f"trajectory {tid}")
        stats = experience_stats(repo)
        assert stats == from_scratch(repo)
        assert list(stats) == sorted(stats)
    assert len(uses(repo)) == 12  # kept, folded tip after tip
    b = experience_stats(repo)["b"]
    assert (b.times_used, b.passed, b.failed) == (12, 8, 4)
    assert b.mean_score == pytest.approx(sum(range(1, 13)) / 120)

    # an outcome on a run and on an experience: counted on top of the rows
    outcomes = OutcomeStore(repo)
    outcomes.add(OutcomeRequest.model_validate(
        {"target_kind": "rollout", "target_id": f"{1:016x}", "verdict": "harmful",
         "score": 0.0, "source": "test"}), "k1")
    outcomes.add(OutcomeRequest.model_validate(
        {"target_kind": "experience", "target_id": "refund-method-rules", "verdict": "helpful",
         "score": 1.0, "source": "test"}), "k2")
    stats = experience_stats(repo)
    assert stats == from_scratch(repo)
    assert (stats["a"].harmful, stats["b"].harmful, stats["c"].harmful) == (1, 1, 0)
    refunds = stats["refund-method-rules"]
    assert refunds.helpful == 1 and refunds.times_used == 0

    # a trajectory removed and one changed: folded, still right
    changed = document(f"{4:016x}", ["c"], False, 0.0).encode()
    store.side.write({store.path_of(f"{2:016x}"): None, store.path_of(f"{4:016x}"): changed},
                     "drop one, change one")
    stats = experience_stats(repo)
    assert stats == from_scratch(repo) and stats["c"].times_used == 5
    assert stats["b"].times_used == 10 and len(uses(repo)) == 11


def test_a_fresh_cache_reads_the_branch_whole(seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    for i in range(1, 4):
        store.store(f"{i:016x}", document(f"{i:016x}", ["a"], True, 1.0), "t")
    experience_stats(seeded_repo)
    _Cache.results.clear()  # a new process, and no index (as after a clone)
    index_file(seeded_repo.git.common_dir).unlink()
    stats = experience_stats(seeded_repo)
    assert stats == from_scratch(seeded_repo) and stats["a"].times_used == 3
