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
reads nothing but two refs; and kept incrementally: when the trajectories branch has only
grown since the last tip seen (the usual case: trajectories are only added), one diff of
the two folder trees finds the new files and only they are read and tallied. Anything
else (a file removed or changed, another history) reads the folder whole. The answer is
always the roll-up of what the branches hold at their tips: no staleness.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

import yaml

from expgit.git.repo import TreeEntry
from expgit.outcomes.records import OutcomeRecord, polarity
from expgit.outcomes.store import OutcomeStore
from expgit.store.repository import ExperienceRepository
from expgit.store.yamlload import BoundedSafeLoader
from expgit.train.experience_usage import read_usage
from expgit.train.track_record import ExperienceStats
from expgit.train.trajectory_store import FOLDER, TrajectoryStore, added_files, folder_files

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




def _front_matter(text: str) -> dict[str, Any] | None:
    """A stored trajectory's front matter (as :func:`~expgit.train.components.
    trajectory_analyzer.read_front_matter` reads it), None if unreadable."""
    end = text.find("\n---\n", 4)
    if not text.startswith("---\n") or end < 0:
        return None
    try:
        data = yaml.load(text[4:end + 1], Loader=BoundedSafeLoader)
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


class _Rows:
    """The usage rows of one trajectories folder tree (by file name), the tallies of
    their uses and those tallies' statistics, extended in place as trajectories are
    added (the branch only grows; anything else rebuilds it)."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        self.rows: dict[str, UsageRow] = {}
        self.tallies: dict[str, _Tally] = {}
        self.stats: dict[str, ExperienceStats] = {}
        self.sorted: dict[str, ExperienceStats] | None = None

    def add(self, name: str, row: UsageRow | None) -> None:
        if row is None:
            return
        self.rows[name] = row
        for used in row.experiences:
            tally = self.tallies.setdefault(used, _Tally(used))
            tally.use(row)
            self.stats[used] = tally.stats()
        self.sorted = None

    def by_name(self) -> dict[str, ExperienceStats]:
        if self.sorted is None:
            self.sorted = {name: self.stats[name] for name in sorted(self.stats)}
        return self.sorted


class _Cache:
    lock: ClassVar[threading.Lock] = threading.Lock()
    rows: ClassVar[dict[str, UsageRow | None]] = {}  # blob id -> parsed row
    results: ClassVar[dict[tuple[str, ...], dict[str, ExperienceStats]]] = {}
    folders: ClassVar[dict[tuple[str, str], _Rows]] = {}  # (common dir, ref) -> rows
    update: ClassVar[threading.Lock] = threading.Lock()  # of ``folders``' entries
    outcomes: ClassVar[dict[tuple[str, str], tuple[str, list[OutcomeRecord]]]] = {}


def _parsed(repo: ExperienceRepository, entries: list[TreeEntry]) -> list[UsageRow | None]:
    """The usage rows of trajectory files (cached by blob id)."""
    with _Cache.lock:
        missing = [e for e in entries if e.sha not in _Cache.rows]
    blobs = repo.git.read_blobs(e.sha for e in missing)
    parsed = {e.sha: trajectory_row(e.name[:-3], blobs[e.sha].decode("utf-8", "replace"))
              for e in missing}
    with _Cache.lock:
        if len(_Cache.rows) + len(parsed) > _ROWS_CACHED:
            _Cache.rows.clear()
        _Cache.rows.update(parsed)
        return [parsed[e.sha] if e.sha in parsed else _Cache.rows.get(e.sha)
                for e in entries]


def _folder_rows(repo: ExperienceRepository, ref: str, tip: str | None) -> _Rows:
    """The rows of the trajectories folder at ``tip``: the cached rows of the last tip
    seen, extended by the files added since (one tree diff), else read whole. Call with
    ``_Cache.update`` held."""
    git = repo.git
    entry = git.path_entry(git.read_commit(tip).tree, FOLDER) if tip else None
    folder = entry.sha if entry is not None and entry.is_tree else None
    key = (str(git.common_dir), ref)
    state = _Cache.folders.get(key)
    if state is not None and state.folder == folder:
        return state
    added = added_files(git, state.folder, folder) \
        if state is not None and state.folder and folder else None
    if state is None or added is None:
        state, added = _Rows(folder), folder_files(git, folder)
    rows = _parsed(repo, added)  # may fail: the state is changed only after
    state.folder = folder
    for new, row in zip(added, rows, strict=True):
        state.add(new.name, row)
    _Cache.folders[key] = state
    return state


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


def with_outcomes(rows: _Rows, outcomes: list[OutcomeRecord]) -> dict[str, ExperienceStats]:
    """The statistics of ``rows`` with ``outcomes`` counted in, as :func:`roll_up` of
    the same rows and records makes them."""
    if not outcomes:
        return rows.by_name()
    used_by = {row.rollout_id: row.experiences for row in rows.rows.values()}
    tallies: dict[str, _Tally] = {}
    for record in outcomes:
        if record.target_kind == "experience":
            names: tuple[str, ...] = (record.target_id,)
        else:
            names = used_by.get(outcome_run_id(record) or "", ())
        for name in names:
            tallies.setdefault(name, _Tally(name)).outcome(record)
    result = dict(rows.stats)
    for name, tally in tallies.items():
        base = result.get(name, ExperienceStats(name))
        result[name] = replace(base, helpful=tally.helpful, harmful=tally.harmful,
                               outcomes=tally.outcomes)
    return {name: result[name] for name in sorted(result)}


def experience_stats(repo: ExperienceRepository) -> dict[str, ExperienceStats]:
    """Per-experience statistics from the trajectories and outcomes branches, by name
    (experiences never used nor judged are absent). Reads only.

    Incremental: the trajectories seen at the last tip are kept with their tallies, and
    a new tip adds only the files added since (a diff of two folder trees)."""
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
    with _Cache.update:
        rows = _folder_rows(repo, trajectories.ref, trajectories_tip)
        result = with_outcomes(rows, _outcome_records(outcomes, outcomes_tip))
    with _Cache.lock:
        if len(_Cache.results) >= _RESULTS_CACHED:
            _Cache.results.clear()
        _Cache.results[key] = result
    return dict(result)
