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

:func:`experience_stats` is cached in memory by the tips of the two branches (and each
trajectory's parsed front matter by its blob id), so a repeated call with no new record
reads nothing but two refs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import yaml

from expgit.outcomes.records import OutcomeRecord, polarity
from expgit.outcomes.store import OutcomeStore
from expgit.repository import ExperienceRepository
from expgit.train.experience_usage import read_usage
from expgit.train.trajectory_store import FOLDER, TrajectoryStore

_ROWS_CACHED = 65536  # parsed trajectory front matters kept, by blob id
_RESULTS_CACHED = 16


@dataclass(frozen=True)
class UsageRow:
    """One evaluated run: its id (the rollout's content id) and the experiences it used."""

    rollout_id: str
    experiences: tuple[str, ...]
    passed: bool | None = None
    score: float | None = None
    at: datetime | None = None


@dataclass(frozen=True)
class ExperienceStats:
    name: str
    times_used: int = 0
    passed: int = 0
    failed: int = 0
    helpful: int = 0
    harmful: int = 0
    outcomes: int = 0  # outcome records attributed to it (any verdict)
    mean_score: float | None = None  # of the evaluations of the runs that used it
    last_used: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mean_score"] = None if self.mean_score is None else round(self.mean_score, 4)
        data["last_used"] = self.last_used.isoformat() if self.last_used else None
        return data


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
        mean = sum(self.scores) / len(self.scores) if self.scores else None
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


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster


def _front_matter(text: str) -> dict[str, Any] | None:
    """A stored trajectory's front matter (as :func:`~expgit.train.components.
    trajectory_analyzer.read_front_matter` reads it), None if unreadable."""
    end = text.find("\n---\n", 4)
    if not text.startswith("---\n") or end < 0:
        return None
    try:
        data = yaml.load(text[4:end + 1], Loader=_Loader)  # a safe loader
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def trajectory_row(tid: str, text: str) -> UsageRow | None:
    """The usage row of one stored trajectory document; None if it names no experience
    or its front matter is unreadable."""
    front = _front_matter(text)
    if front is None:
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


class _Cache:
    lock: ClassVar[threading.Lock] = threading.Lock()
    rows: ClassVar[dict[str, UsageRow | None]] = {}  # blob id -> parsed row
    results: ClassVar[dict[tuple[str, ...], dict[str, ExperienceStats]]] = {}


def _trajectory_rows(repo: ExperienceRepository, tip: str | None) -> list[UsageRow]:
    if tip is None:
        return []
    git = repo.git
    folder = git.path_entry(git.read_commit(tip).tree, FOLDER)
    if folder is None or not folder.is_tree:
        return []
    entries = [e for e in git.read_tree(folder.sha)
               if not e.is_tree and e.name.endswith(".md")]
    with _Cache.lock:
        missing = [e for e in entries if e.sha not in _Cache.rows]
    blobs = git.read_blobs(e.sha for e in missing)
    parsed = {e.sha: trajectory_row(e.name[:-3], blobs[e.sha].decode("utf-8", "replace"))
              for e in missing}
    with _Cache.lock:
        if len(_Cache.rows) + len(parsed) > _ROWS_CACHED:
            _Cache.rows.clear()
        _Cache.rows.update(parsed)
        rows = [parsed[e.sha] if e.sha in parsed else _Cache.rows.get(e.sha)
                for e in entries]
    return [row for row in rows if row is not None]


def experience_stats(repo: ExperienceRepository) -> dict[str, ExperienceStats]:
    """Per-experience statistics from the trajectories and outcomes branches, by name
    (experiences never used nor judged are absent). Reads only."""
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
    rows = _trajectory_rows(repo, trajectories_tip)
    result = roll_up(rows, outcomes.all() if outcomes_tip else [])
    with _Cache.lock:
        if len(_Cache.results) >= _RESULTS_CACHED:
            _Cache.results.clear()
        _Cache.results[key] = result
    return dict(result)


TRACK_RECORD_CHARS = 240


def track_record(stats: ExperienceStats | None) -> str:
    """One bounded line for a prompt: how the experience has fared so far."""
    if stats is None or (stats.times_used == 0 and stats.outcomes == 0):
        return "no recorded use yet"
    parts = [f"in the agent's context for {stats.times_used} evaluated run"
             f"{'s' if stats.times_used != 1 else ''}: {stats.passed} passed, "
             f"{stats.failed} failed"]
    if stats.mean_score is not None:
        parts.append(f"mean score {stats.mean_score:.2f}")
    if stats.outcomes:
        parts.append(f"outcome reports: {stats.helpful} helpful, {stats.harmful} harmful")
    if stats.last_used is not None:
        parts.append(f"last used {stats.last_used:%Y-%m-%d}")
    return "; ".join(parts)[:TRACK_RECORD_CHARS]
