"""Per-experience statistics: how often each experience was in the agent's context, how
those runs were evaluated, and what outcome records say about it.

Two sources, both read from git (no side database):

* the trajectories branch: each stored trajectory's front matter carries the
  ``experiences_used`` of its rollout and the ``evaluation`` (passed, score) it was
  analysed with (:mod:`expgit.train.components.trajectory_analyzer`). Each trajectory
  counts one use of each experience it names: ``times_used``, ``passed`` / ``failed``,
  the mean evaluation score and ``last_used`` (its ``analyzed_at``);
* the outcome records (:class:`~expgit.outcomes.store.OutcomeStore`): a verdict on an
  experience counts for it directly; a verdict on a rollout or a trajectory counts for
  every experience that rollout used. Positive verdicts (helpful, pass) count as
  ``helpful``, negative ones (harmful, fail) as ``harmful``; proposals are not counted.

:func:`experience_stats` keeps one row per (trajectory file, experience it used) in the
derived index (docs/design.md "Derived caches"): the table ``trajectory_uses`` with the
fold ``trajectory_uses:<ref>``; the statistics are SQL sums of the rows, the roll-up of
what the branches hold at their tips. Within a process the answer is also kept by the
two tips, so a repeated call with no new record reads nothing but two refs and the
index's fold.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from expgit.errors import GitError, InvalidInputError
from expgit.outcomes.records import OutcomeRecord, polarity
from expgit.outcomes.store import OutcomeStore
from expgit.retrieval.usage import read_usage
from expgit.store.derived.cache import DerivedIndex, derive
from expgit.store.repository import ExperienceRepository
from expgit.train.components.trajectory_analyzer import read_front_matter
from expgit.train.measurement.track_record import ExperienceStats
from expgit.train.records.trajectory_store import FOLDER, TrajectoryStore

_RESULTS_CACHED = 16


@dataclass(frozen=True)
class UsageRow:
    """One evaluated run: its id (the rollout's content id) and the experiences it used."""

    rollout_id: str
    experiences: tuple[str, ...]
    passed: bool | None = None
    score: float | None = None
    at: datetime | None = None


class _Tally:
    def __init__(self, name: str) -> None:
        self.name = name
        self.used = self.passed = self.failed = self.helpful = self.harmful = 0
        self.outcomes = 0
        self.scores: list[float] = []
        self.last: datetime | None = None

    def use(self, row: UsageRow) -> None:
        self.used += 1
        if row.passed is not None:
            self.passed += row.passed
            self.failed += not row.passed
        if row.score is not None:
            self.scores.append(row.score)
        if row.at is not None and (self.last is None or row.at > self.last):
            self.last = row.at

    def outcome(self, record: OutcomeRecord) -> None:
        self.outcomes += 1
        sign = polarity(record.verdict)
        self.helpful += sign > 0
        self.harmful += sign < 0

    def stats(self) -> ExperienceStats:
        mean = math.fsum(self.scores) / len(self.scores) if self.scores else None
        return ExperienceStats(self.name, self.used, self.passed, self.failed, self.helpful,
                               self.harmful, self.outcomes, mean, self.last)


def outcome_run_id(record: OutcomeRecord) -> str | None:
    """The rollout id an outcome on a rollout or trajectory refers to, else None."""
    if record.target_kind == "rollout":
        return record.target_id.strip().lower()
    if record.target_kind == "trajectory":
        path = record.target_id.rpartition(":")[2]
        return path.rpartition("/")[2].removesuffix(".md").lower() or None
    return None


def roll_up(rows: Iterable[UsageRow], outcomes: Iterable[OutcomeRecord],
            aliases: Mapping[str, str] | None = None) -> dict[str, ExperienceStats]:
    """Per-experience statistics of ``rows`` and ``outcomes`` (see the module docstring),
    by name. ``aliases`` map other ids of a run (e.g. an execution id) to its rollout id."""
    tallies: dict[str, _Tally] = {}
    used_by: dict[str, tuple[str, ...]] = {}

    def tally(name: str) -> _Tally:
        return tallies.setdefault(name, _Tally(name))

    for row in rows:
        used_by[row.rollout_id] = row.experiences
        for name in row.experiences:
            tally(name).use(row)
    for record in outcomes:
        if record.target_kind == "experience":
            tally(record.target_id).outcome(record)
            continue
        run = outcome_run_id(record)
        run = (aliases or {}).get(run, run) if run is not None else None
        for name in used_by.get(run or "", ()):
            tally(name).outcome(record)
    return {name: tallies[name].stats() for name in sorted(tallies)}


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time (naive ones taken as UTC), None if ``value`` is not one."""
    try:
        when = value if isinstance(value, datetime) else \
            datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


def trajectory_row(tid: str, text: str) -> UsageRow | None:
    """The usage row of one stored trajectory document; None if it names no experience
    or its front matter is unreadable."""
    try:
        front = read_front_matter(text, tid)
    except InvalidInputError:
        return None
    used = tuple(u.name for u in read_usage(front))
    if not used:
        return None
    evaluation = front.get("evaluation")
    evaluation = evaluation if isinstance(evaluation, dict) else {}
    passed = evaluation.get("passed")
    score = evaluation.get("score")
    return UsageRow(tid, used, passed if isinstance(passed, bool) else None,
                    float(score) if isinstance(score, int | float) else None,
                    parse_time(front.get("analyzed_at")))


TABLE = "trajectory_uses"
SCHEMA_VERSION = 1
DDL = """CREATE TABLE trajectory_uses (
    ref TEXT NOT NULL, name TEXT NOT NULL, pos INTEGER NOT NULL, blob TEXT NOT NULL,
    rollout_id TEXT NOT NULL, experience TEXT NOT NULL, passed INTEGER, score REAL,
    at TEXT, at_key REAL, PRIMARY KEY (ref, name, pos)) WITHOUT ROWID;
    CREATE INDEX trajectory_uses_rollout ON trajectory_uses (ref, rollout_id)"""


class _Cache:
    lock: ClassVar[threading.Lock] = threading.Lock()
    results: ClassVar[dict[tuple[str, ...], dict[str, ExperienceStats]]] = {}
    outcomes: ClassVar[dict[tuple[str, str], tuple[str, list[OutcomeRecord]]]] = {}


def _uses(name: str, blob: str, row: UsageRow | None) -> list[tuple[object, ...]]:
    """The index rows of trajectory file ``name``: one per experience its run used."""
    if row is None:
        return []
    return [(name, pos, blob, row.rollout_id, used, row.passed, row.score,
             None if row.at is None else row.at.isoformat(),
             None if row.at is None else row.at.timestamp())
            for pos, used in enumerate(row.experiences)]


def _fold(ix: DerivedIndex, db: sqlite3.Connection, trajectories: TrajectoryStore,
          tip: str | None) -> None:
    """Bring the rows of the trajectories branch to ``tip`` (inside the write
    transaction): the files changed since the folded tip, else every file."""
    ref, fold = trajectories.ref, f"{TABLE}:{trajectories.ref}"
    side, git = trajectories.side, trajectories.repo.git
    folded = ix.folded(fold)
    if folded == (tip or ""):
        return  # another process folded it meanwhile

    def folder(commit: str | None) -> str | None:
        entry = git.path_entry(git.read_commit(commit).tree, FOLDER) if commit else None
        return entry.sha if entry is not None and entry.is_tree else None

    changes = None
    try:
        old, new = folder(folded), folder(tip)
        if folded is not None and old is not None and new is not None:
            changes = side.fanned_changes(old, new, suffix=".md")
    except GitError:  # the folded tip is gone
        pass
    if changes is None:
        db.execute("DELETE FROM trajectory_uses WHERE ref = ?", (ref,))
        changes = [(e.name, None, e.sha) for e in (
            side.fanned_entries(FOLDER, suffix=".md", tip=tip) if tip else [])]
    new_blobs = {sha: name for name, _, sha in changes if sha is not None}
    texts = git.read_blobs(new_blobs)
    db.executemany("DELETE FROM trajectory_uses WHERE ref = ? AND name = ?",
                   [(ref, name) for name, _, _ in changes])
    db.executemany(
        "INSERT INTO trajectory_uses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(ref, *use) for sha, name in new_blobs.items() for use in _uses(
            name, sha, trajectory_row(name[:-3], texts[sha].decode("utf-8", "replace")))])
    ix.fold(db, fold, tip or "")


def _stats(db: sqlite3.Connection, ref: str) -> dict[str, ExperienceStats]:
    """The statistics of the rows of ``ref`` (no outcomes), by name."""
    scores: dict[str, list[float]] = {}
    for name, score in db.execute("SELECT experience, score FROM trajectory_uses "
                                  "WHERE ref = ? AND score IS NOT NULL", (ref,)):
        scores.setdefault(name, []).append(score)
    return {name: ExperienceStats(
        name, used, passed, failed, mean_score=math.fsum(scores[name]) / len(scores[name])
        if name in scores else None, last_used=parse_time(at))
        for name, used, passed, failed, _, at in db.execute(
            "SELECT experience, count(*), sum(passed IS 1), sum(passed IS 0), max(at_key), "
            "at FROM trajectory_uses WHERE ref = ? GROUP BY experience ORDER BY experience",
            (ref,))}


def _used_by(db: sqlite3.Connection, ref: str, runs: set[str]
             ) -> dict[str, tuple[str, ...]]:
    """The experiences each of the rollouts ``runs`` used, by rollout id."""
    found: dict[str, list[str]] = {}
    for run, name in db.execute(
            "SELECT rollout_id, experience FROM trajectory_uses WHERE ref = ? AND rollout_id "
            "IN (SELECT value FROM json_each(?)) ORDER BY name, pos", (ref, json.dumps(
                sorted(runs)))):
        found.setdefault(run, []).append(name)
    return {run: tuple(names) for run, names in found.items()}


def _outcome_records(store: OutcomeStore, tip: str | None) -> list[OutcomeRecord]:
    """Every outcome record at ``tip`` of the outcomes branch (the last tip's kept)."""
    if tip is None:
        return []
    key = (str(store.repo.git.common_dir), store.branch.ref)
    cached = _Cache.outcomes.get(key)
    if cached is not None and cached[0] == tip:
        return cached[1]
    records = store.all()
    _Cache.outcomes[key] = (tip, records)
    return records


def with_outcomes(stats: dict[str, ExperienceStats], used_by: Mapping[str, tuple[str, ...]],
                  outcomes: list[OutcomeRecord]) -> dict[str, ExperienceStats]:
    """``stats`` with ``outcomes`` counted in (``used_by``: the experiences of the runs
    they name), as :func:`roll_up` of the same rows and records makes them."""
    tallies: dict[str, _Tally] = {}
    for record in outcomes:
        if record.target_kind == "experience":
            names: tuple[str, ...] = (record.target_id,)
        else:
            names = used_by.get(outcome_run_id(record) or "", ())
        for name in names:
            tallies.setdefault(name, _Tally(name)).outcome(record)
    result = dict(stats)
    for name, tally in tallies.items():
        base = result.get(name, ExperienceStats(name))
        result[name] = replace(base, helpful=tally.helpful, harmful=tally.harmful,
                               outcomes=tally.outcomes)
    return {name: result[name] for name in sorted(result)}


def experience_stats(repo: ExperienceRepository) -> dict[str, ExperienceStats]:
    """Per-experience statistics from the trajectories and outcomes branches, by name
    (experiences never used nor judged are absent). Reads only git; keeps the derived
    index's rows (see the module docstring)."""
    trajectories = TrajectoryStore(repo)
    outcomes = OutcomeStore(repo)
    trajectories_tip = repo.git.ref(trajectories.ref)
    outcomes_tip = outcomes.branch.tip()
    key = (str(repo.git.common_dir), trajectories.ref, trajectories_tip or "",
           outcomes.branch.ref, outcomes_tip or "")
    with _Cache.lock:
        cached = _Cache.results.get(key)
    if cached is not None:
        return dict(cached)
    records = _outcome_records(outcomes, outcomes_tip)
    runs = {run for record in records if (run := outcome_run_id(record)) is not None}

    ref = trajectories.ref

    def summed(db: sqlite3.Connection) -> dict[str, ExperienceStats]:
        return with_outcomes(_stats(db, ref), _used_by(db, ref, runs), records)

    def compute(ix: DerivedIndex) -> dict[str, ExperienceStats]:
        """The sums read in one transaction when the rows are of the tip, else folded and
        read in one write transaction."""
        def folded(db: sqlite3.Connection) -> dict[str, ExperienceStats]:
            _fold(ix, db, trajectories, trajectories_tip)
            return summed(db)
        ix.table(TABLE, SCHEMA_VERSION, DDL)
        kept = ix.read(lambda db: summed(db) if ix.folded(f"{TABLE}:{ref}") == (
            trajectories_tip or "") else None)
        return kept if kept is not None else ix.update(folded)
    result = derive(repo.git.common_dir, compute)
    with _Cache.lock:
        if len(_Cache.results) >= _RESULTS_CACHED:
            _Cache.results.clear()
        _Cache.results[key] = result
    return dict(result)
